// Each bad spec gets an error naming the spec file and line.
// RUN: not shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_nomatch.yaml" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_twice.yaml" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_bad_key.yaml" 2>&1 | FileCheck %s --check-prefix=BADKEY
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_two_strategies.yaml" 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_broken.yaml" 2>&1 | FileCheck %s --check-prefix=BROKEN
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%t.missing.yaml" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not shoal-opt %s --shoal-annotate 2>&1 | FileCheck %s --check-prefix=UNDECLARED
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp_bad_schedule.yaml" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp_bad_key.yaml" 2>&1 | FileCheck %s --check-prefix=PIPEKEY
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp_virtual_no_interleave.yaml" 2>&1 | FileCheck %s --check-prefix=VNOINT
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp_interleave_no_virtual.yaml" 2>&1 | FileCheck %s --check-prefix=INTNOV
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_input_unknown.yaml" 2>&1 | FileCheck %s --check-prefix=INPUTNAME
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_input_bad_dim.yaml" 2>&1 | FileCheck %s --check-prefix=INPUTDIM
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_input_bad_key.yaml" 2>&1 | FileCheck %s --check-prefix=INPUTKEY

// NOMATCH: spec_nomatch.yaml:3: pattern '/nothing/*' of scope 'blocks' matches no node
// TWICE: spec_twice.yaml:4: node '/fc1/Gemm' is claimed by scope 'a' (line 3) and by scope 'b'
// BADKEY: spec_bad_key.yaml:3: unknown scope key 'devices' (expected replicate, split, name, nodes, exclude, recompute, sequence_parallel)
// TWO: spec_two_strategies.yaml:3: a scope needs exactly one of 'replicate: n' or 'split: n'
// BROKEN: spec_broken.yaml:{{[0-9]+}}: invalid YAML
// MISSING: missing.yaml: cannot read the annotation spec: No such file or directory
// UNDECLARED: scope 'nope' is not declared in the module's 'shoal.scopes'
// SCHEDULE: spec_pp_bad_schedule.yaml:2: schedule must be gpipe, 1f1b or interleaved, got 'zb'
// PIPEKEY: spec_pp_bad_key.yaml:2: unknown pipeline key 'chunks' (expected num_micro_batch, schedule, virtual_stages)
// VNOINT: spec_pp_virtual_no_interleave.yaml:3: virtual_stages needs schedule: interleaved
// INPUTNAME: spec_input_unknown.yaml:3: 'src' is not a graph input (graph inputs: x)
// INPUTDIM: spec_input_bad_dim.yaml:4: batch_dim 5 of input 'x' is out of range: the input has rank 2
// INPUTKEY: spec_input_bad_key.yaml:3: unknown key 'batch_axis' of input 'x' (expected batch_dim)
// INTNOV: spec_pp_interleave_no_virtual.yaml:3: schedule: interleaved needs virtual_stages of at least 2

func.func @undeclared(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = shoal.relu %x {shoal.scope = "nope"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
