#!/usr/bin/env bash
# Checks that the flag table of a doc page keeps up with `dist-train --help`: every long flag of
# the help has a row, every row is a flag of the help, and where both give a default, the
# defaults are equal. Bash and awk only (the CI machine may have no python).
#
#   check_flag_table.sh DIST_TRAIN_BINARY DOC_FILE
#
# The help is CLI11's: an option line starts with two spaces and a dash; its option column is
# `-h,--name TYPE=DEFAULT` and ends where two or more spaces start the description, or at the
# end of the line when the description is on the next one (CLI11 puts a description on the
# option's line at column 31, after a single space when the option is 28 characters long). A
# type may contain spaces and `=` (`INT:-1 or >= 1=-1`): the default is what follows the last
# `=`, unless a space follows it.
# The table's rows start with "| `--"; the first column is the flag (maybe `--name N`), the
# second the default (backticks allowed, empty for none).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 DIST_TRAIN_BINARY DOC_FILE" >&2
  exit 2
fi
binary=$1
doc=$2
tool=$(basename "$binary")
[[ -r $doc ]] || { echo "check_flag_table: cannot read $doc" >&2; exit 2; }
if ! help=$("$binary" --help 2>&1); then
  echo "check_flag_table: '$binary --help' failed:" >&2
  printf '%s\n' "$help" >&2
  exit 2
fi

# One line per flag: name, a tab, 1 or 0 (has a default), a tab, the default.
help_flags=$(printf '%s\n' "$help" | awk '
  { line[NR] = $0 }
  END {
    for (i = 1; i <= NR; i++) {
      if (line[i] !~ /^  -/) continue
      column = substr(line[i], 3)
      if (match(column, /  +/)) {
        column = substr(column, 1, RSTART - 1)
      } else if (length(line[i]) > 30 && line[i + 1] !~ /^                              /) {
        # CLI11 starts a description on the option line at column 31, after a single space
        # when the option fills the 30 columns before it.
        column = substr(line[i], 3, 28)
      }
      sub(/ +$/, "", column)
      if (!match(column, /--[A-Za-z0-9][A-Za-z0-9_-]*/)) continue
      flag = substr(column, RSTART, RLENGTH)
      if (flag == "--help") continue
      last = 0
      for (j = 1; j <= length(column); j++) if (substr(column, j, 1) == "=") last = j
      value = last ? substr(column, last + 1) : ""
      has = (last && value !~ /^ /) ? 1 : 0
      if (!has) value = ""
      printf "%s\t%d\t%s\n", flag, has, value
    }
  }')
doc_flags=$(awk -F'|' '
  /^\| `--/ {
    if (!match($2, /--[A-Za-z0-9][A-Za-z0-9_-]*/)) next
    flag = substr($2, RSTART, RLENGTH)
    if (flag == "--help") next
    value = $3
    gsub(/`/, "", value)
    gsub(/^[ \t]+|[ \t]+$/, "", value)
    printf "%s\t%d\t%s\n", flag, (value != "") ? 1 : 0, value
  }' "$doc")

if [[ -z $help_flags ]]; then
  echo "check_flag_table: found no flags in '$tool --help'" >&2
  exit 1
fi
if [[ -z $doc_flags ]]; then
  echo "check_flag_table: $doc has no flag table (rows starting with | \`--)" >&2
  exit 1
fi

# Compare: the help's lines first (file "h"), then the doc's (file "d").
report=$( { printf '%s\n' "$help_flags" | awk '{ print "h\t" $0 }'
            printf '%s\n' "$doc_flags" | awk '{ print "d\t" $0 }'; } |
  awk -F'\t' -v doc="$doc" -v tool="$tool" '
    $1 == "h" { order[++n] = $2; in_help[$2] = 1; help_has[$2] = $3; help_value[$2] = $4; next }
    $1 == "d" {
      if ($2 in in_doc) { printf "%s lists %s twice\n", doc, $2; next }
      in_doc[$2] = 1; doc_order[++m] = $2; doc_has[$2] = $3; doc_value[$2] = $4
    }
    END {
      for (i = 1; i <= n; i++) {
        f = order[i]
        if (!(f in in_doc)) { printf "%s is missing from %s (%s --help has it)\n", f, doc, tool; continue }
        if (help_has[f] && doc_has[f] && help_value[f] != doc_value[f])
          printf "default of %s differs: %s --help says \"%s\", %s says \"%s\"\n", \
            f, tool, help_value[f], doc, doc_value[f]
      }
      for (j = 1; j <= m; j++)
        if (!(doc_order[j] in in_help))
          printf "%s is in %s but not in %s --help\n", doc_order[j], doc, tool
    }')

if [[ -n $report ]]; then
  printf '%s\n' "$report" >&2
  problems=$(wc -l <<< "$report")
  (( problems == 1 )) && noun=problem || noun=problems
  echo "check_flag_table: $doc does not match $tool --help ($problems $noun)" >&2
  exit 1
fi
echo "$doc: $(wc -l <<< "$help_flags") flags match $tool --help"
