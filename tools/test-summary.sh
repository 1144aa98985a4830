#!/bin/sh
# Prints one closing line for `make test`: the C tests' "N passed, N failed" lines and busted's
# "N successes / N failures / N errors" summed, as "tests: N passed, N failed".
# Usage: tools/test-summary.sh LOGFILE...
awk '
  /^[0-9]+ passed, [0-9]+ failed/ { p += $1; f += $3 }
  / successes? \/ [0-9]+ failures? \/ [0-9]+ errors? / {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^success/) p += $i
      if ($(i+1) ~ /^failure/) f += $i
      if ($(i+1) ~ /^error/) f += $i
    }
  }
  END { printf "tests: %d passed, %d failed\n", p, f }
' "$@"
