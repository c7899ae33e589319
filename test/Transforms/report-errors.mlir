// shoal-report's options: an unknown format, a file it cannot write.
// RUN: not shoal-opt %s --shoal-report="format=svg" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FORMAT
// FORMAT: error: shoal-report: unknown format 'svg' (text or dot)
// RUN: not shoal-opt %s --shoal-report="file=%t.missing/report.txt" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FILE
// FILE: error: shoal-report: {{.*}}.missing/report.txt: cannot create a file in {{.*}}.missing: No such file or directory

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
