# Sourced by the scripts that take CRDs from published Go modules (gang-crds.sh,
# third-party-crds.sh); they define `die`.

# The directory of module@version in the Go module cache, downloaded from `dir` (a module, or a
# scratch directory outside any), after checking its hash against the pinned `sum` (the Go
# checksum database has checked it too, as for any download).
pinned_module_dir() { # dir module@version sum
    local json dir sum
    json="$(cd "$1" && go mod download -json "$2")" || die "go mod download $2 failed"
    dir="$(python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])' <<<"$json")"
    sum="$(python3 -c 'import json, sys; print(json.load(sys.stdin)["Sum"])' <<<"$json")"
    [ "$sum" = "$3" ] || die "$2 has hash $sum, not the pinned $3"
    echo "$dir"
}
