"""Megatron-LM's weak-scaling table (Table 1 of Narayanan et al., SC'21), as data.

D. Narayanan, M. Shoeybi, J. Casper, P. LeGresley, M. Patwary, V. Korthikanti,
D. Vainbrand, P. Kashinkunti, J. Bernauer, B. Catanzaro, A. Phanishayee,
M. Zaharia: "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC'21. arXiv:2104.04473.

Sources (where each figure came from)
-------------------------------------
[P]  The paper, read from a Markdown transcription of the arXiv PDF (the
     search index's file id 63285939983, no repository named): Table 1 (every
     column of TABLE_1 below except the ones marked [S]); section 5 intro
     (hardware: Selene, 8 x 80-GB A100 per node, NVLink + NVSwitch, eight
     200 Gb/s HDR InfiniBand HCAs per node for the application plus two for
     storage, three-level fat tree of 850 switches, 312 TFLOP/s 16-bit peak);
     section 5.1 (V = 51,200, s = 2048, "we use the interleaved pipeline
     schedule with the scatter/gather optimization enabled", equations (2)
     and (3), "equation (3) assumes activation recomputation"); Appendix
     (derivation of equation (3)); section 5.9 (892 GB/s and 12.9 TB/s
     effective bisection bandwidth on the 1T run; the introduction rounds the
     latter to 13 TB/s).
[S]  NVIDIA/Megatron-LM, examples/sc21/run_table_1.sh ("Table 1 showing
     weak-scaling throughput", per examples/sc21/README.md), commit
     cf547dea839f709ec2f147da0679d663da3c20da (flag
     --activations-checkpoint-method uniform; the later version at commit
     79a3bb6bf2c85b748c46749dd0695e23310d4e16 has the same values with the
     flag renamed --recompute-method uniform): per row TP, PP, MBS, GBS,
     layers, hidden, heads, nodes, DDP implementation, and
     --num-layers-per-virtual-pipeline-stage. examples/sc21/CONFIG.sh (read
     from the fork OpenGPTX/Megatron-LM at commit
     6b27e3ad918cc49d50211b2911ddf729353c0211): --seq-length 2048,
     --max-position-embeddings 2048, --fp16, --loss-scale 8192.
[R]  The Megatron-LM README of 2021-22 (mirror developer.sourcefind.cn,
     OpenDAS/megatron-lm commit 2d767f48): "All models use a vocabulary size
     of 51,200 and a sequence length of 2048", up to 3072 A100 GPUs on
     Selene, "Each cluster node has 8 NVIDIA 80GB A100 GPUs", and the 145B
     model used TP=8 x PP=8. The README shows the table only as an image.

Checks and flags
----------------
- Confirmed by two sources ([P] and [S]): heads, hidden size, layers, TP, PP,
  number of GPUs (= 8 x the script's nodes) and batch size of every row.
- From one source only ([P], one transcription; no second copy of the
  numbers was found): parameters, TFLOP/s per GPU, percentage of peak,
  aggregate PFLOP/s. They are self-consistent: equation (2) gives every
  parameter count to the printed digit (1.65 -> "1.7"); per-GPU x GPUs gives
  the aggregate within the rounding of the per-GPU figure (1T: 163 x 3072 =
  500.7 vs 502.0 printed, i.e. 163.4 TFLOP/s unrounded); TFLOP/s / 312 gives
  the percentage. The abstract and introduction repeat the 1T row (502
  petaFLOP/s, 52 % of peak, 163 teraFLOP/s per GPU).
- Micro-batch size: the paper does not give it for Table 1; the values are
  the script's ([S]) only.
- Interleaved schedule: the paper says section 5.1 used it, but the script
  sets virtual pipeline stages only for 76B, 145B, 310B and 530B. The 1T row
  has no --num-layers-per-virtual-pipeline-stage (2 layers per stage), so as
  scripted it runs the non-interleaved 1F1B (PipeDream-Flush) schedule; rows
  with PP = 1 have no pipeline and the 39B row (PP = 2) has no interleaving.
  Unresolved: which the 1T measurement used. `virtual_stages` below is the
  script's (layers / PP) / layers-per-virtual-stage; None where not set.
- Activation recomputation: used on every row (the script's uniform
  checkpointing, one transformer layer per checkpoint by Megatron's default
  --checkpoint-num-layers 1 [default assumed, not read here]); equation (3)
  counts its extra forward pass.
- GPUs: A100 SXM 80 GB ([P], [R]); mixed precision fp16 ([S]); peak 312
  TFLOP/s 16-bit ([P]).
- NVLink bandwidth: not stated in the paper (it says only "NVLink and
  NVSwitch"); left None here.
- The parameter count of equation (2) counts one V x h matrix: the LM head is
  tied to the word embedding (Megatron's default). bench/gpt_mlir.py's graph
  is untied unless --tie-embeddings, so it has V x h more parameters (GPT-3:
  175.24B untied; tied 174.62B = equation (2) + the final LayerNorm's 2h,
  the paper's 174.6B).
"""

# Shared settings of every Table 1 run.
SETTINGS = {
    "sequence_length": 2048,            # [P] 5.1, [S] CONFIG.sh, [R]
    "vocab_size": 51200,                # [P] 5.1 ("multiple of 1024"), [R]
    "max_position_embeddings": 2048,    # [S] CONFIG.sh
    "precision": "fp16 mixed precision",  # [P] 5 ("mixed precision"), [S] --fp16
    "gpu": "NVIDIA A100 SXM4 80 GB",    # [P] 5, [R]
    "peak_tflops_16bit": 312,           # [P] 5
    "gpus_per_node": 8,                 # [P] 5 (DGX A100 nodes on Selene)
    "intra_node": "NVLink + NVSwitch",  # [P] 5
    "nvlink_gbytes_per_s": None,        # not in the paper (flagged above)
    "inter_node": "8 x NVIDIA Mellanox 200 Gb/s HDR InfiniBand HCAs per node "
                  "for application traffic (+2 for storage)",  # [P] 5
    "ib_hcas_per_node": 8,              # [P] 5, 4.1
    "ib_gbits_per_s_per_hca": 200,      # [P] 5
    "topology": "three-level (leaf, spine, core) fat tree, 850 switches",  # [P] 5
    "cluster": "Selene",                # [P] 5, [R]
    "pipeline_schedule": "interleaved 1F1B with scatter/gather "
                         "(paper, 5.1; see the flag on virtual_stages)",
    "activation_recomputation": True,   # [P] eq. (3) note, [S] every row
    "throughput_is_end_to_end": True,   # [P] 5.1: data loading, optimizer, communication, logging
}

# Table 1. Columns from [P] unless marked; micro_batch_size, virtual_stages
# and ddp_impl from [S]; data_parallel = num_gpus / (tp * pp).
TABLE_1 = [
    dict(params_billion=1.7, attention_heads=24, hidden_size=2304, num_layers=24,
         tensor_parallel=1, pipeline_parallel=1, num_gpus=32, batch_size=512,
         tflops_per_gpu=137, percent_of_peak=44, aggregate_pflops=4.4,
         data_parallel=32, micro_batch_size=16, virtual_stages=None, ddp_impl="torch"),
    dict(params_billion=3.6, attention_heads=32, hidden_size=3072, num_layers=30,
         tensor_parallel=2, pipeline_parallel=1, num_gpus=64, batch_size=512,
         tflops_per_gpu=138, percent_of_peak=44, aggregate_pflops=8.8,
         data_parallel=32, micro_batch_size=16, virtual_stages=None, ddp_impl="torch"),
    dict(params_billion=7.5, attention_heads=32, hidden_size=4096, num_layers=36,
         tensor_parallel=4, pipeline_parallel=1, num_gpus=128, batch_size=512,
         tflops_per_gpu=142, percent_of_peak=46, aggregate_pflops=18.2,
         data_parallel=32, micro_batch_size=16, virtual_stages=None, ddp_impl="torch"),
    dict(params_billion=18.4, attention_heads=48, hidden_size=6144, num_layers=40,
         tensor_parallel=8, pipeline_parallel=1, num_gpus=256, batch_size=1024,
         tflops_per_gpu=135, percent_of_peak=43, aggregate_pflops=34.6,
         data_parallel=32, micro_batch_size=8, virtual_stages=None, ddp_impl="torch"),
    dict(params_billion=39.1, attention_heads=64, hidden_size=8192, num_layers=48,
         tensor_parallel=8, pipeline_parallel=2, num_gpus=512, batch_size=1536,
         tflops_per_gpu=138, percent_of_peak=44, aggregate_pflops=70.8,
         data_parallel=32, micro_batch_size=4, virtual_stages=None, ddp_impl="local"),
    dict(params_billion=76.1, attention_heads=80, hidden_size=10240, num_layers=60,
         tensor_parallel=8, pipeline_parallel=4, num_gpus=1024, batch_size=1792,
         tflops_per_gpu=140, percent_of_peak=45, aggregate_pflops=143.8,
         data_parallel=32, micro_batch_size=2, virtual_stages=3, ddp_impl="local"),
    dict(params_billion=145.6, attention_heads=96, hidden_size=12288, num_layers=80,
         tensor_parallel=8, pipeline_parallel=8, num_gpus=1536, batch_size=2304,
         tflops_per_gpu=148, percent_of_peak=47, aggregate_pflops=227.1,
         data_parallel=24, micro_batch_size=2, virtual_stages=2, ddp_impl="local"),
    dict(params_billion=310.1, attention_heads=128, hidden_size=16384, num_layers=96,
         tensor_parallel=8, pipeline_parallel=16, num_gpus=1920, batch_size=2160,
         tflops_per_gpu=155, percent_of_peak=50, aggregate_pflops=297.4,
         data_parallel=15, micro_batch_size=1, virtual_stages=2, ddp_impl="local"),
    dict(params_billion=529.6, attention_heads=128, hidden_size=20480, num_layers=105,
         tensor_parallel=8, pipeline_parallel=35, num_gpus=2520, batch_size=2520,
         tflops_per_gpu=163, percent_of_peak=52, aggregate_pflops=410.2,
         data_parallel=9, micro_batch_size=1, virtual_stages=3, ddp_impl="local"),
    dict(params_billion=1008.0, attention_heads=160, hidden_size=25600, num_layers=128,
         tensor_parallel=8, pipeline_parallel=64, num_gpus=3072, batch_size=3072,
         tflops_per_gpu=163, percent_of_peak=52, aggregate_pflops=502.0,
         data_parallel=6, micro_batch_size=1, virtual_stages=None, ddp_impl="local"),
]

# GPT-3 175B (96 layers, 96 heads, hidden 12288), not a Table 1 row: [P] 5.1
# "On n=1024 A100 GPUs using batch size 1536, we achieve X=140 teraFLOP/s per
# GPU" (TP/PP not stated there), and Table 2's PTD-P rows for the 174.6B model
# (model-parallel size 96, micro-batch 1, batch 1536).
GPT3_175B = {
    "params_billion": 174.6, "attention_heads": 96, "hidden_size": 12288, "num_layers": 96,
    "section_5_1": {"num_gpus": 1024, "batch_size": 1536, "tflops_per_gpu": 140,
                    "training_days_300b_tokens": 34},
    "table_2_ptd": [  # (num_gpus, tflops_per_gpu, training days for 300B tokens)
        {"num_gpus": 384, "tflops_per_gpu": 153, "days": 84},
        {"num_gpus": 768, "tflops_per_gpu": 149, "days": 43},
        {"num_gpus": 1536, "tflops_per_gpu": 141, "days": 23},
    ],
    "model_parallel_size": 96, "micro_batch_size": 1, "batch_size": 1536,
}


def num_params(l, h, V=51200, s=2048):
    """Equation (2) of [P]: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h))."""
    return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


def model_flops_per_iteration(B, s, l, h, V):
    """Equation (3) of [P], confirmed against its Appendix: FLOPs of one
    training iteration with activation recomputation (forward, backward = 2x
    forward, and the recomputed forward: 4 x (24 B s h^2 + 4 B s^2 h) per
    layer, plus 6 B s h V for the logit layer):
        F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    Counts the GEMMs only ("a lower bound ... but should be close")."""
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


if __name__ == "__main__":
    s, V = SETTINGS["sequence_length"], SETTINGS["vocab_size"]
    print("%8s %5s %6s %4s %3s %3s %5s %5s %4s %4s %7s | %8s %8s %6s" % (
        "params", "heads", "hidden", "l", "tp", "pp", "gpus", "B", "TF", "%pk",
        "PF", "eq2 (B)", "TFxN/1e3", "TF/312"))
    for r in TABLE_1:
        assert r["num_gpus"] == r["tensor_parallel"] * r["pipeline_parallel"] * r["data_parallel"]
        print("%8.1f %5d %6d %4d %3d %3d %5d %5d %4d %4d %7.1f | %8.2f %8.1f %5.1f%%" % (
            r["params_billion"], r["attention_heads"], r["hidden_size"], r["num_layers"],
            r["tensor_parallel"], r["pipeline_parallel"], r["num_gpus"], r["batch_size"],
            r["tflops_per_gpu"], r["percent_of_peak"], r["aggregate_pflops"],
            num_params(r["num_layers"], r["hidden_size"], V, s) / 1e9,
            r["tflops_per_gpu"] * r["num_gpus"] / 1e3,
            100 * r["tflops_per_gpu"] / SETTINGS["peak_tflops_16bit"]))
