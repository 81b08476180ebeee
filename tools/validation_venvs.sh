#!/usr/bin/env bash
# The virtual environments that validate fitplan's torchtune and axolotl output with the released
# packages' own config loaders (tests/emitters/test_emit_validate.py, test_emit_validate_axolotl.py).
# Each pins torch/torchao/transformers versions of its own, so each gets its own venv.
#
#   eval "$(tools/validation_venvs.sh)"             build both (cached), export their paths
#   eval "$(tools/validation_venvs.sh torchtune)"   only one (torchtune or axolotl)
#
# Built once per install line, cached under ${FITPLAN_CI_CACHE:-$HOME/.cache/fitplan-ci}
# (validate-NAME-KEY, KEY hashing the install line; a `.complete` marker says it finished), so a
# second run only prints. stdout carries only the `export …` lines; progress goes to stderr.
# torch is installed first and pinned (a CPU build from the index; an unpinned torch would pull a
# CUDA build of several GB).
set -euo pipefail

CACHE=${FITPLAN_CI_CACHE:-$HOME/.cache/fitplan-ci}
TORCH="torch==2.13.0"
# the released versions the emitters target (searcher/emitters/data/versions.json)
declare -A PACKAGES=(
  [torchtune]="torchtune==0.6.1 torchao==0.10.0"
  [axolotl]="axolotl==0.19.0"
)
declare -A VARIABLE=(
  [torchtune]=FITPLAN_EMIT_VALIDATE
  [axolotl]=FITPLAN_AXOLOTL_VALIDATE
)

log() { printf '[validation_venvs %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

build() {
  local name=$1 line key venv start
  line="$TORCH; ${PACKAGES[$name]}"
  key=$(printf '%s' "$line" | sha256sum | cut -c1-12)
  venv=$CACHE/validate-$name-$key
  if [ ! -f "$venv/.complete" ]; then
    start=$SECONDS
    log "building $venv ($line)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$venv/bin/python" -m pip install -q "$TORCH" >&2
    # shellcheck disable=SC2086  # the package list is words
    "$venv/bin/python" -m pip install -q ${PACKAGES[$name]} >&2
    touch "$venv/.complete"
    log "$name venv built in $((SECONDS - start)) s"
  else
    log "$name venv cached: $venv"
  fi
  printf 'export %s=%q\n' "${VARIABLE[$name]}" "$venv"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(torchtune axolotl)
mkdir -p "$CACHE"
for name in "${names[@]}"; do
  if [ -z "${PACKAGES[$name]:-}" ]; then
    echo "validation_venvs: unknown venv '$name' (torchtune or axolotl)" >&2
    exit 2
  fi
  build "$name"
done
