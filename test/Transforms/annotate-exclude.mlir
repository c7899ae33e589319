// `exclude:` takes nodes out of a scope that its patterns match: one layer
// (`l`) applied twice, its second call named as the first with `_1` on the
// innermost module (`/l/fc_1/MatMul`, `/l_1/Add`), as PyTorch's exporter
// names ALBERT's shared layer; each call gets a scope (a pipeline stage).
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_exclude.yaml" | FileCheck %s
// Exclude patterns may overlap (each one that takes a node out counts).
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_exclude_overlap.yaml" | FileCheck %s
// Errors name the spec line: an exclude pattern that takes nothing out of
// its scope, a pattern whose every node its scope excludes, and an exclude
// that is not a list.
// RUN: not shoal-opt %s --shoal-annotate="spec=%inputs/spec_exclude_nomatch.yaml" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not shoal-opt %s --shoal-annotate="spec=%inputs/spec_exclude_all.yaml" 2>&1 | FileCheck %s --check-prefix=ALL
// RUN: not shoal-opt %s --shoal-annotate="spec=%inputs/spec_exclude_bad.yaml" 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: shoal.scopes = [#shoal.scope<"call0", replicate, 1>, #shoal.scope<"call1", replicate, 1>]
// CHECK: shoal.matmul {{.*}}shoal.scope = "call0"
// CHECK: shoal.relu {{.*}}shoal.scope = "call0"
// CHECK: shoal.add {{.*}}shoal.scope = "call0"
// CHECK: shoal.matmul {{.*}}shoal.scope = "call1"
// CHECK: shoal.relu {{.*}}shoal.scope = "call1"
// CHECK: shoal.add {{.*}}shoal.scope = "call1"

// NOMATCH: spec_exclude_nomatch.yaml:3: exclude pattern '/x/*' of scope 'call0' matches no node that the scope's patterns match
// ALL: spec_exclude_all.yaml:3: pattern '/l/fc_1/*' of scope 'call0' matches only nodes that the scope excludes
// BAD: spec_exclude_bad.yaml:3: scope 'call0': 'exclude' needs a list of node name patterns

func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = shoal.weight "l.fc.weight" : tensor<8x8xf32> loc("l.fc.weight")
  %h = shoal.matmul %x, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("/l/fc/MatMul")
  %r = shoal.relu %h : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("/l/act/Relu")
  %y = shoal.add %x, %r : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> loc("/l/Add")
  %h1 = shoal.matmul %y, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("/l/fc_1/MatMul")
  %r1 = shoal.relu %h1 : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("/l/act_1/Relu")
  %y1 = shoal.add %y, %r1 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> loc("/l_1/Add")
  return %y1 : tensor<2x8xf32>
}
