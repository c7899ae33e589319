"""The models of shoal's model zoo (test/zoo/run_zoo.py), built from real
libraries with random weights; nothing is downloaded.

Each entry of MODELS is a Model: how to build it (a function of torch that
returns the module, its inputs in forward() order as numpy arrays, and the
names of its outputs), which Python packages it needs, the regular
expression whose first group is the node-name prefix of one repeated layer
(for the PP2 layout: the layers are cut in two halves; None: no PP2), the
graph inputs whose batch is not dimension 0, and whether the model also
trains (transformer families).

Sizes are small on purpose (2-core CI machines): torchvision's classifiers
at 32x32 to 64x64 pixels, 10 classes, batch 4; the large torchvision
architectures (densenet, convnext, swin, vit) as small configurations of the
same classes; Hugging Face models from configs with 2 layers, hidden 64,
4 heads, vocabulary 101 (odd like GPT-2's 50257: split(2) cuts it unevenly),
sequence 16, batch 4.
"""

import collections

import numpy as np

BATCH = 4
SEQ = 16
VOCAB = 101
HIDDEN = 64
HEADS = 4


class Model:
    def __init__(self, name, group, build, needs=(), layers=None, batch_dims=None,
                 train=False, lm=False, notes="", pipeline=True, opset=None,
                 tensor_parallel_layers=None):
        self.name = name
        self.group = group              # torchvision | torch.nn | transformers
        self.build = build              # build(torch) -> (module, inputs, output names)
        self.needs = tuple(needs)       # importable modules besides torch, onnx, numpy
        self.layers = layers            # regex, group 1 = one layer's name prefix
        self.batch_dims = batch_dims or {}
        self.train = train
        self.lm = lm                    # output [..., VOCAB] logits (train-tp2-ce)
        self.notes = notes
        # False: the layer names cannot cut stages; or the two stages'
        # scopes as ([node patterns], [exclude patterns]) when the layer
        # prefixes cannot (a shared layer called twice, the second call
        # named as the first with `_1` suffixes).
        self.pipeline = pipeline
        self.opset = opset              # the export's opset (None: the runner's)
        # None, or why the layers have no tensor-parallel layout that
        # computes no replicated work (train-rep-split is then n/a).
        self.tensor_parallel_layers = tensor_parallel_layers


class NotApplicable(Exception):
    """Raised by a model's build when the installed libraries cannot make
    it (every layout is then n/a, with the message)."""


def _rng(salt):
    return np.random.default_rng([0, 1000 + salt])


def _image(size, salt=0):
    return collections.OrderedDict(
        pixel_values=_rng(salt).standard_normal((BATCH, 3, size, size)).astype(np.float32))


def _ids(names, salt=0):
    r = _rng(salt)
    return collections.OrderedDict(
        (n, r.integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)) for n in names)


def _redraw(torch, model, std=0.1):
    """Every parameter redrawn (deep-copied layers would otherwise share
    values and the exporter would turn the repeats into Identity nodes)."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=g)
            elif "norm" in name and name.endswith("weight"):
                p.uniform_(0.7, 1.3, generator=g)
            else:
                p.normal_(0.0, 0.05, generator=g)


def _randomize_bn(torch, model):
    """Non-trivial BatchNorm statistics and affine parameters (eval mode)."""
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.uniform_(0.7, 1.3, generator=g)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0.0, 0.1, generator=g)
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.normal_(0.0, 0.2, generator=g)
                    m.running_var.uniform_(0.5, 2.0, generator=g)


# --------------------------------------------------------------------------
# torchvision

def _tv(fn, size):
    def build(torch):
        import torchvision.models as tvm
        model = fn(tvm)
        _randomize_bn(torch, model)
        return model, _image(size), ["logits"]
    return build


def _densenet(tvm):
    return tvm.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16,
                        bn_size=2, num_classes=10)


def _convnext(tvm):
    from torchvision.models.convnext import CNBlockConfig
    return tvm.ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)],
                        stochastic_depth_prob=0.0, num_classes=10)


def _swin(tvm):
    return tvm.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2],
                               num_heads=[2, 4], window_size=[4, 4],
                               stochastic_depth_prob=0.0, num_classes=10)


def _maxvit(tvm):
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(32, 32), stem_channels=16, partition_size=4,
                  block_channels=[32, 64], block_layers=[1, 1], head_dim=8,
                  stochastic_depth_prob=0.0, num_classes=10)


def _googlenet(tvm):
    return tvm.GoogLeNet(num_classes=10, aux_logits=False, init_weights=True)


def _vit(tvm):
    import torch
    model = tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                                  hidden_dim=64, mlp_dim=128, num_classes=10)
    with torch.no_grad():  # torchvision zero-initializes the head (logits all 0)
        model.heads.head.weight.normal_(0.0, 0.1)
        model.class_token.normal_(0.0, 0.1)
    return model


TV = ("torchvision",)
FEATURES = r"^(/features/features\.\d+/)"

MODELS = [
    Model("resnet18", "torchvision", _tv(lambda m: m.resnet18(num_classes=10), 64), TV,
          layers=r"^(/layer\d/)", notes="resnet18, 64x64"),
    Model("mobilenet_v2", "torchvision", _tv(lambda m: m.mobilenet_v2(num_classes=10), 64), TV,
          layers=FEATURES, notes="mobilenet_v2, 64x64"),
    Model("mobilenet_v3_small", "torchvision",
          _tv(lambda m: m.mobilenet_v3_small(num_classes=10), 64), TV,
          layers=FEATURES, notes="mobilenet_v3_small, 64x64"),
    Model("efficientnet_b0", "torchvision",
          _tv(lambda m: m.efficientnet_b0(num_classes=10), 64), TV,
          layers=FEATURES, notes="efficientnet_b0, 64x64"),
    Model("densenet", "torchvision", _tv(_densenet, 64), TV,
          layers=r"^(/features/(?:denseblock|transition)\d/)",
          notes="DenseNet(growth 8, blocks 2-2-2-2), 64x64"),
    Model("shufflenet_v2", "torchvision",
          _tv(lambda m: m.shufflenet_v2_x0_5(num_classes=10), 64), TV,
          layers=r"^(/stage\d/)", notes="shufflenet_v2_x0_5, 64x64"),
    Model("convnext", "torchvision", _tv(_convnext, 64), TV, layers=FEATURES,
          notes="ConvNeXt(32-64 channels, 2+2 blocks), 64x64"),
    Model("swin", "torchvision", _tv(_swin, 64), TV, layers=FEATURES,
          notes="SwinTransformer(embed 32, depths 2-2, window 4), 64x64"),
    Model("maxvit", "torchvision", _tv(_maxvit, 32), TV,
          layers=r"^(/blocks\.\d+/)",
          notes="MaxVit(stem 16, blocks 32-64, partition 4), 32x32: Einsum "
                "between activations in its attention"),
    Model("googlenet", "torchvision", _tv(_googlenet, 64), TV,
          layers=r"^(/inception\d[a-e]/)",
          notes="googlenet, 64x64: Concat of four channel branches"),
    Model("vit", "torchvision", _tv(_vit, 32), TV,
          layers=r"^(/encoder/layers/encoder_layer_\d+/)",
          notes="VisionTransformer(32x32, patch 8, 2 layers, hidden 64)"),
]


# --------------------------------------------------------------------------
# torch.nn.Transformer*

def _nn_encoder(torch, batch_first=True):
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, dim_feedforward=128, dropout=0.0,
                                       batch_first=batch_first)
    model = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(HIDDEN),
                                  enable_nested_tensor=False)
    _redraw(torch, model)
    shape = (BATCH, SEQ, HIDDEN) if batch_first else (SEQ, BATCH, HIDDEN)
    x = _rng(0).standard_normal(shape).astype(np.float32)
    return model, collections.OrderedDict(src=x), ["out"]


def _nn_decoder(torch):
    nn = torch.nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerDecoderLayer(HIDDEN, HEADS, dim_feedforward=128, dropout=0.0,
                                               batch_first=True, norm_first=True,
                                               activation="gelu")
            self.decoder = nn.TransformerDecoder(layer, 2)

        def forward(self, tgt, memory):
            mask = torch.triu(torch.full((tgt.size(1), tgt.size(1)), float("-inf")), 1)
            return self.decoder(tgt, memory, tgt_mask=mask)

    model = Decoder()
    _redraw(torch, model)
    r = _rng(1)
    return model, collections.OrderedDict(
        tgt=r.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32),
        memory=r.standard_normal((BATCH, 12, HIDDEN)).astype(np.float32)), ["out"]


def _nn_transformer(torch):
    model = torch.nn.Transformer(HIDDEN, HEADS, num_encoder_layers=2, num_decoder_layers=2,
                                 dim_feedforward=128, dropout=0.0, batch_first=False)
    _redraw(torch, model)
    r = _rng(2)
    return model, collections.OrderedDict(
        src=r.standard_normal((12, BATCH, HIDDEN)).astype(np.float32),
        tgt=r.standard_normal((8, BATCH, HIDDEN)).astype(np.float32)), ["out"]


def _two_blocks(torch, block, salt):
    """A model of two `block`s applied in turn (`/layers.N/...` nodes),
    its parameters redrawn, and a float input x [BATCH, SEQ, HIDDEN]."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([block(), block()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Model()
    _redraw(torch, model)
    x = _rng(salt).standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    return model, collections.OrderedDict(x=x), ["out"]


def _strided_ops(torch):
    """Small layers around the ops whose gradients are new: a float CumSum,
    flip (a Slice of step -1) and x[..., ::2] (a Slice of step 2)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(HIDDEN, HIDDEN)
            self.out = nn.Linear(HIDDEN, HIDDEN)

        def forward(self, x):
            h = torch.tanh(self.inp(x))
            a = torch.cumsum(h, dim=1) * 0.1
            b = h.flip(-1)
            c = h[..., ::2]
            return x + self.out(a + b + torch.cat([c, c.flip(-1)], dim=-1))

    return _two_blocks(torch, Block, salt=3)


def _moe_bmm(torch):
    """A mixture of experts routed as transformers 5's batched_mm experts
    are (integrations/moe.py): the top 2 of a softmax router, normalized;
    each token's two experts' matrices gathered by the routing ids
    (`w1[ids]`, a Gather of a stack of matrices with ids computed at run
    time), batched products, a SiLU, the weighted sum over the two. Static
    shapes, so torch 1.13's exporter writes it whole; its training needs
    TopK's gradient."""
    nn = torch.nn
    experts, top, inner = 4, 2, 96

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(HIDDEN, experts, bias=False)
            self.w1 = nn.Parameter(torch.empty(experts, HIDDEN, inner))
            self.w2 = nn.Parameter(torch.empty(experts, inner, HIDDEN))

        def forward(self, x):
            tokens = x.reshape(-1, HIDDEN)
            p = torch.softmax(self.router(tokens), dim=-1)
            w, ids = torch.topk(p, top, dim=-1)
            w = w / w.sum(-1, keepdim=True)
            ids = ids.reshape(-1)
            xs = tokens.unsqueeze(1).expand(-1, top, -1).reshape(-1, 1, HIDDEN)
            h = nn.functional.silu(torch.bmm(xs, self.w1[ids]))
            y = torch.bmm(h, self.w2[ids]).reshape(-1, top, HIDDEN)
            y = (y * w.unsqueeze(-1)).sum(1)
            return y.reshape(x.shape)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN)
            self.moe = MoE()

        def forward(self, x):
            return x + self.moe(self.norm(x))

    return _two_blocks(torch, Block, salt=5)


MODELS += [
    Model("nn.TransformerEncoder", "torch.nn", _nn_encoder,
          layers=r"^(/layers\.\d+/)", train=True,
          notes="2 post-norm layers, batch_first, final LayerNorm"),
    Model("nn.TransformerEncoder-seq", "torch.nn",
          lambda torch: _nn_encoder(torch, batch_first=False),
          layers=r"^(/layers\.\d+/)", train=True, batch_dims={"src": 1},
          notes="as nn.TransformerEncoder, sequence-first (batch_first=False)"),
    Model("strided_ops", "torch.nn", _strided_ops,
          layers=r"^(/layers\.\d+/)", train=True,
          tensor_parallel_layers="its layers flip and stride the hidden dimension of "
                                 "their first product, which must then stay whole",
          notes="2 blocks of a float cumsum over the sequence, flip (Slice step "
                "-1) and x[..., ::2] (Slice step 2): their gradients"),
    Model("moe_bmm", "torch.nn", _moe_bmm,
          layers=r"^(/layers\.\d+/)", train=True,
          tensor_parallel_layers="its routers' products stay whole, as Megatron-LM "
                                 "replicates its router (a softmax over the experts "
                                 "needs them whole; the report warns of them)",
          notes="2 blocks of a top-2 mixture of 4 experts routed as transformers "
                "5's batched_mm: experts' matrices gathered by run-time ids, "
                "batched products; TopK's gradient"),
    Model("nn.TransformerEncoder-opset11", "torch.nn", _nn_encoder,
          layers=r"^(/layers\.\d+/)", train=True, opset=11,
          notes="as nn.TransformerEncoder, exported at opset 11: LayerNorm as "
                "ReduceMean, Sub, Pow, Sqrt, Div"),
    Model("nn.TransformerDecoder", "torch.nn", _nn_decoder,
          layers=r"^(/decoder/layers\.\d+/)", train=True,
          notes="2 pre-norm GELU layers, batch_first, causal tgt_mask"),
    Model("nn.Transformer", "torch.nn", _nn_transformer,
          layers=r"^(/(?:encoder|decoder)/layers\.\d+/)", train=True,
          batch_dims={"src": 1, "tgt": 1},
          notes="2+2 layers, sequence-first"),
]


# --------------------------------------------------------------------------
# Hugging Face transformers (configs, random weights)

def _hf(make, input_names, image=None):
    """make(transformers) -> model; the wrapper returns the first output
    (the logits). `image`: a vision model of pixel_values [BATCH, 3, image,
    image] (input_names ["pixel_values"])."""
    def build(torch):
        import inspect
        import transformers
        torch.manual_seed(0)
        inner = make(transformers)
        # HF initializes biases to 0 and LayerNorm weights to 1: identical
        # tensors that the exporter deduplicates into one initializer, so the
        # ONNX model would train one where PyTorch trains several.
        _redraw(torch, inner)

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.hf = inner

            def forward(self, *args):
                kw = dict(zip(input_names, args), return_dict=False)
                if "use_cache" in inspect.signature(self.hf.forward).parameters:
                    kw["use_cache"] = False
                return self.hf(**kw)[0]

        if image:
            return Wrapper().eval(), _image(image), ["logits"]
        inputs = _ids([n for n in input_names if n != "attention_mask"])
        # No token is the padding id: PyTorch never trains an nn.Embedding's
        # padding_idx row, and an ONNX export does not say which row that is
        # (a Gather), so shoal trains it like any other (docs/Importer.md).
        pad = getattr(inner.config, "pad_token_id", None)
        if pad is not None:
            for n, a in inputs.items():
                if n.endswith("input_ids"):
                    a[a == pad] = (pad + 1) % VOCAB
        if "token_type_ids" in inputs:
            inputs["token_type_ids"] = (inputs["token_type_ids"] % 2).astype(np.int64)
        if "attention_mask" in input_names:
            mask = np.ones((BATCH, SEQ), dtype=np.int64)
            mask[1, SEQ - 4:] = 0       # one padded sequence
            inputs["attention_mask"] = mask
            inputs = collections.OrderedDict((n, inputs[n]) for n in input_names)
        return Wrapper().eval(), inputs, ["logits"]
    return build


# tie_word_embeddings=False everywhere: with tied embeddings, the exporter's
# constant folding writes the LM head's transposed copy of the embedding as a
# second initializer, so the ONNX model trains two matrices where PyTorch
# trains one (the forward pass is the same either way).

def _small(**kw):
    d = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=HEADS, max_position_embeddings=32,
             initializer_range=0.1, tie_word_embeddings=False)
    d.update(kw)
    return d


def _gpt2(t):
    return t.GPT2LMHeadModel(t.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=HIDDEN, n_layer=2, n_head=HEADS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.1,
        tie_word_embeddings=False))


def _llama(t):
    return t.LlamaForCausalLM(t.LlamaConfig(**_small(num_key_value_heads=2)))


def _mistral(t):
    return t.MistralForCausalLM(t.MistralConfig(**_small(num_key_value_heads=2,
                                                         sliding_window=8)))


def _mixtral(t):
    return t.MixtralForCausalLM(t.MixtralConfig(**_small(
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=None)))


def _mixtral_bmm(t):
    # transformers 5's static-shape experts (integrations/moe.py,
    # batched_mm_experts_forward): each token's k experts' matrices
    # gathered by run-time ids (GatherND), no data-dependent shapes. The
    # loop of transformers 4 (`mixtral`) exports its routing as constants.
    if int(t.__version__.split(".")[0]) < 5:
        raise NotApplicable("needs transformers >= 5 (experts_implementation="
                            "'batched_mm'); transformers %s" % t.__version__)
    return t.MixtralForCausalLM(t.MixtralConfig(**_small(
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=None), experts_implementation="batched_mm"))


def _bert(t):
    return t.BertForMaskedLM(t.BertConfig(**_small(hidden_dropout_prob=0.0,
                                                   attention_probs_dropout_prob=0.0)))


def _t5(t):
    return t.T5ForConditionalGeneration(t.T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=128, num_layers=2,
        num_decoder_layers=2, num_heads=HEADS, relative_attention_num_buckets=8,
        dropout_rate=0.0, initializer_factor=1.0, tie_word_embeddings=False))


def _opt(t):
    return t.OPTForCausalLM(t.OPTConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=128, num_hidden_layers=2,
        num_attention_heads=HEADS, max_position_embeddings=32, word_embed_proj_dim=HIDDEN,
        dropout=0.0, attention_dropout=0.0, init_std=0.1, tie_word_embeddings=False))


def _bloom(t):
    return t.BloomForCausalLM(t.BloomConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=2, n_head=HEADS,
        hidden_dropout=0.0, attention_dropout=0.0, initializer_range=0.1,
        tie_word_embeddings=False))


def _roberta(t):
    return t.RobertaForMaskedLM(t.RobertaConfig(**_small(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=1,
        max_position_embeddings=SEQ + 2)))


def _gptj(t):
    return t.GPTJForCausalLM(t.GPTJConfig(
        vocab_size=VOCAB, n_positions=32, n_embd=HIDDEN, n_layer=2, n_head=HEADS,
        rotary_dim=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        initializer_range=0.1, tie_word_embeddings=False))


def _neox(t):
    return t.GPTNeoXForCausalLM(t.GPTNeoXConfig(**_small(
        rotary_pct=0.5, use_parallel_residual=True, hidden_dropout=0.0,
        attention_dropout=0.0)))


def _albert(t):
    return t.AlbertForMaskedLM(t.AlbertConfig(
        vocab_size=VOCAB, embedding_size=32, hidden_size=HIDDEN, num_hidden_layers=2,
        num_attention_heads=HEADS, intermediate_size=128, max_position_embeddings=32,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.1,
        classifier_dropout_prob=0.0))


def _falcon(t):
    return t.FalconForCausalLM(t.FalconConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS,
        multi_query=True, new_decoder_architecture=False, parallel_attn=True, bias=False,
        alibi=False, hidden_dropout=0.0, attention_dropout=0.0, initializer_range=0.1,
        tie_word_embeddings=False))


def _bigcode(t):
    return t.GPTBigCodeForCausalLM(t.GPTBigCodeConfig(
        vocab_size=VOCAB, n_positions=32, n_embd=HIDDEN, n_layer=2, n_head=HEADS,
        multi_query=True, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        initializer_range=0.1, tie_word_embeddings=False))


def _bart(t):
    return t.BartForConditionalGeneration(t.BartConfig(
        vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, init_std=0.1, tie_word_embeddings=False,
        scale_embedding=True))


def _clip_text(t):
    return t.CLIPTextModelWithProjection(t.CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, projection_dim=32,
        num_hidden_layers=2, num_attention_heads=HEADS, max_position_embeddings=32,
        dropout=0.0, attention_dropout=0.0, initializer_range=0.1))


def _hf_vit(t):
    return t.ViTForImageClassification(t.ViTConfig(
        image_size=24, patch_size=8, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=2,
        num_attention_heads=HEADS, intermediate_size=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, num_labels=10, initializer_range=0.1))


HF = ("transformers",)
MODELS += [
    Model("gpt2", "transformers", _hf(_gpt2, ["input_ids"]), HF,
          layers=r"^(/hf/transformer/h\.\d+/)", train=True, lm=True, notes="GPT2LMHeadModel"),
    Model("llama", "transformers", _hf(_llama, ["input_ids"]), HF,
          layers=r"^(/hf/model/layers\.\d+/)", train=True, lm=True,
          notes="LlamaForCausalLM, GQA 4/2 heads"),
    Model("mistral", "transformers", _hf(_mistral, ["input_ids"]), HF,
          layers=r"^(/hf/model/layers\.\d+/)", train=True, lm=True,
          notes="MistralForCausalLM, GQA 4/2 heads, sliding window 8"),
    Model("mixtral", "transformers", _hf(_mixtral, ["input_ids"]), HF,
          layers=r"^(/hf/model/layers\.\d+/)", train=True, lm=True,
          notes="MixtralForCausalLM, 4 experts, top-2"),
    Model("mixtral_bmm", "transformers", _hf(_mixtral_bmm, ["input_ids"]), HF,
          layers=r"^(/hf/model/layers\.\d+/)", train=True, lm=True,
          notes="MixtralForCausalLM, 4 experts, top-2, transformers 5's "
                "experts_implementation='batched_mm'"),
    Model("bert", "transformers", _hf(_bert, ["input_ids", "token_type_ids",
                                              "attention_mask"]), HF,
          layers=r"^(/hf/bert/encoder/layer\.\d+/)", train=True, lm=True,
          notes="BertForMaskedLM, one padded sequence"),
    Model("opt", "transformers", _hf(_opt, ["input_ids", "attention_mask"]), HF,
          layers=r"^(/hf/decoder/layers\.\d+/)", train=True, lm=True,
          notes="OPTForCausalLM, learned positions from cumsum(attention_mask), "
                "one padded sequence"),
    Model("bloom", "transformers", _hf(_bloom, ["input_ids", "attention_mask"]), HF,
          layers=r"^(/hf/transformer/h\.\d+/)", train=True, lm=True,
          notes="BloomForCausalLM, ALiBi from cumsum(attention_mask), fused QKV, "
                "one padded sequence"),
    Model("roberta", "transformers", _hf(_roberta, ["input_ids"]), HF,
          layers=r"^(/hf/roberta/encoder/layer\.\d+/)", train=True, lm=True,
          notes="RobertaForMaskedLM, position ids from cumsum(input_ids != pad)"),
    Model("gptj", "transformers", _hf(_gptj, ["input_ids"]), HF,
          layers=r"^(/hf/transformer/h\.\d+/)", train=True, lm=True,
          notes="GPTJForCausalLM, rotary on 8 of 16 dims (rotate_every_two: x[..., ::2])"),
    Model("gpt_neox", "transformers", _hf(_neox, ["input_ids"]), HF,
          layers=r"^(/hf/gpt_neox/layers\.\d+/)", train=True, lm=True,
          notes="GPTNeoXForCausalLM, parallel residual, rotary on half the dims"),
    Model("albert", "transformers", _hf(_albert, ["input_ids"]), HF,
          layers=r"^(/hf/albert/encoder/albert_layer_groups\.0/albert_layers\.0(?:_\d+)?/)",
          train=True, lm=True,
          # The exporter names the shared layer's second call as the first,
          # with `_1` on the innermost module (`attention/query_1/MatMul`,
          # `attention_1/Softmax`, `albert_layers.0_1/Add`): the first call
          # is the layer's nodes less those.
          pipeline=[(["/hf/albert/encoder/albert_layer_groups.0/albert_layers.0/*"],
                     ["*_1/*"]),
                    (["*/albert_layers.0/*_1/*", "*/albert_layers.0_1/*"], [])],
          notes="AlbertForMaskedLM, one layer's weights shared by both layers, "
                "embedding 32 projected to 64 (PP2: a stage per call of the "
                "shared layer, cut with `exclude:` patterns)"),
    Model("falcon", "transformers", _hf(_falcon, ["input_ids"]), HF,
          layers=r"^(/hf/transformer/h\.\d+/)", train=True, lm=True,
          notes="FalconForCausalLM, multi-query attention (fused QKV), parallel attention"),
    Model("gpt_bigcode", "transformers", _hf(_bigcode, ["input_ids"]), HF,
          layers=r"^(/hf/transformer/h\.\d+/)", train=True, lm=True,
          notes="GPTBigCodeForCausalLM, multi-query attention (fused QKV)"),
    Model("bart", "transformers", _hf(_bart, ["input_ids", "decoder_input_ids"]), HF,
          layers=r"^(/hf/model/(?:encoder|decoder)/layers\.\d+/)", train=True, lm=True,
          notes="BartForConditionalGeneration, encoder-decoder"),
    Model("clip_text", "transformers", _hf(_clip_text, ["input_ids"]), HF,
          layers=r"^(/hf/text_model/encoder/layers\.\d+/)", train=True,
          notes="CLIPTextModelWithProjection, pooled at each sequence's argmax id "
                "(a gather that mixes the batch)"),
    Model("hf_vit", "transformers", _hf(_hf_vit, ["pixel_values"], image=24), HF,
          layers=r"^(/hf/vit/encoder/layer\.\d+/)", train=True,
          notes="ViTForImageClassification, 24x24, patch 8: 9 patches and the class "
                "token, 10 positions that sequence parallelism splits over tp=2 (an "
                "odd count is refused, as Megatron-LM refuses it)"),
    Model("t5", "transformers", _hf(_t5, ["input_ids", "decoder_input_ids"]), HF,
          layers=r"^(/hf/(?:encoder|decoder)/block\.\d+/)", train=True, lm=True,
          notes="T5ForConditionalGeneration"),
]

BY_NAME = collections.OrderedDict((m.name, m) for m in MODELS)
