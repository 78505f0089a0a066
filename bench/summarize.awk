# Prints one results table from bench/run.sh's TSV lines: table, row, target, tps (and, in the
# logins table, the proxy's CPU ms per login, - when unknown).
# Variables: table (which table), targets (space-separated column order),
# ratios (space-separated "a/b" pairs of targets), cpu (non-empty: CPU columns too, each the
# median with the rounds' lowest and highest, and their ratios). Each cell is the median over
# rounds; a cell with any failed round shows FAIL, one never measured shows -. A ratio is the
# median of the rounds' own ratios: the rounds are interleaved, so each pairs two measurements
# taken seconds apart, and the machine's speed, which drifts between rounds on a shared host,
# cancels out of each pair (the ratio of the medians shown beside it can be read off the cells).

function median(list,    values, n, i, j, v) {
  n = split(list, values, " ")
  for (i = 2; i <= n; i++) {
    v = values[i] + 0
    for (j = i - 1; j >= 1 && values[j] + 0 > v; j--) values[j + 1] = values[j]
    values[j + 1] = v
  }
  if (n % 2) return values[(n + 1) / 2]
  return (values[n / 2] + values[n / 2 + 1]) / 2
}

BEGIN { FS = "\t" }

$1 == table {
  if (!($2 in seen)) { seen[$2] = 1; rows[++nrows] = $2 }
  key = $2 SUBSEP $3
  if ($4 == "FAIL") failed[key] = 1
  else samples[key] = samples[key] " " $4
  if ($5 != "" && $5 != "-") cpus[key] = cpus[key] " " $5
}

# The median of the ratios a[k]/b[k] of two lists of rounds; -1 when they do not pair up.
function pairedRatio(a, b,    x, y, n, k, list) {
  n = split(a, x, " ")
  if (n == 0 || n != split(b, y, " ")) return -1
  list = ""
  for (k = 1; k <= n; k++) {
    if (y[k] + 0 <= 0) return -1
    list = list " " (x[k] / y[k])
  }
  return median(list)
}

# "median (lowest-highest)" of a list of numbers.
function spread(list,    values, n, i, low, high) {
  n = split(list, values, " ")
  low = high = values[1] + 0
  for (i = 2; i <= n; i++) {
    if (values[i] + 0 < low) low = values[i] + 0
    if (values[i] + 0 > high) high = values[i] + 0
  }
  return sprintf("%.2f (%.2f-%.2f)", median(list), low, high)
}

END {
  ntargets = split(targets, target, " ")
  nratios = split(ratios, ratio, " ")
  printf "%-18s", ""
  for (t = 1; t <= ntargets; t++) printf " %14s", target[t] " tps"
  for (r = 1; r <= nratios; r++) printf " %18s", ratio[r]
  if (cpu) {
    for (t = 1; t <= ntargets; t++) printf " %20s", target[t] " ms/login"
    for (r = 1; r <= nratios; r++) printf " %18s", ratio[r] " cpu"
  }
  printf "\n"
  for (i = 1; i <= nrows; i++) {
    printf "%-18s", rows[i]
    for (t = 1; t <= ntargets; t++) {
      key = rows[i] SUBSEP target[t]
      if (!(key in failed) && (key in samples)) { tps[target[t]] = median(samples[key]); printf " %14.0f", tps[target[t]] }
      else { delete tps[target[t]]; printf " %14s", (key in failed) ? "FAIL" : "-" }
    }
    for (r = 1; r <= nratios; r++) {
      split(ratio[r], pair, "/")
      value = (pair[1] in tps) && (pair[2] in tps) ? pairedRatio(samples[rows[i] SUBSEP pair[1]], samples[rows[i] SUBSEP pair[2]]) : -1
      if (value >= 0) printf " %18.3f", value
      else printf " %18s", "n/a"
    }
    if (cpu) printCpu(rows[i])
    printf "\n"
  }
}

function printCpu(row,    t, r, key, pair, value) {
  for (t = 1; t <= ntargets; t++) {
    key = row SUBSEP target[t]
    printf " %20s", (key in cpus) ? spread(cpus[key]) : "-"
  }
  for (r = 1; r <= nratios; r++) {
    split(ratio[r], pair, "/")
    value = pairedRatio(cpus[row SUBSEP pair[1]], cpus[row SUBSEP pair[2]])
    if (value >= 0) printf " %18.2f", value
    else printf " %18s", "n/a"
  }
}
