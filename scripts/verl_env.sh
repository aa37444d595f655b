#!/usr/bin/env bash
# Build the integration environment: verl-agent's CPU-installable requirements, then ccpo on top
# without moving any version verl-agent resolved. CI (.ci/run) and users run the same script.
#
#   scripts/verl_env.sh PYTHON TARGET_DIR VERL_AGENT_HOME
#   scripts/verl_env.sh --stamp PYTHON VERL_AGENT_HOME   # prints the key of a valid environment
#
# verl-agent is not installed into the environment (a user's checkout may be read-only): tests and
# `ccpo train --backend verl` import it from PYTHONPATH=$VERL_AGENT_HOME.
# A rerun with the same interpreter, requirements and ccpo pyproject.toml reuses TARGET_DIR, also
# one built from another clone (CI keeps it outside the clone, keyed by --stamp): ccpo's editable
# install is then pointed at this clone, nothing else moves.
set -euo pipefail
PRINT_STAMP=0
if [ "${1:-}" = "--stamp" ]; then
  PRINT_STAMP=1
  shift
  set -- "${1:-}" "-" "${2:-}"
fi
PY=${1:?usage: verl_env.sh PYTHON TARGET_DIR VERL_AGENT_HOME}
TARGET=${2:?usage: verl_env.sh PYTHON TARGET_DIR VERL_AGENT_HOME}
VERL_AGENT_HOME=${3:-${VERL_AGENT_HOME:?usage: verl_env.sh PYTHON TARGET_DIR VERL_AGENT_HOME}}
REPO=$(cd "$(dirname "$0")/.." && pwd)
VERL_AGENT_HOME=$(cd "$VERL_AGENT_HOME" && pwd)
SETUP_PY="$VERL_AGENT_HOME/setup.py"
[ -f "$SETUP_PY" ] || { echo "verl_env.sh: no setup.py in VERL_AGENT_HOME=$VERL_AGENT_HOME" >&2; exit 3; }

stamp_of() {
  { "$PY" -c 'import sys; print(sys.version)'; cat "$SETUP_PY" "$REPO/pyproject.toml" "$0"; } | sha256sum | cut -d' ' -f1
}
STAMP=$(stamp_of)
if [ "$PRINT_STAMP" = 1 ]; then
  echo "$STAMP"
  exit 0
fi
if [ -f "$TARGET/.ccpo-verl-env" ] && [ "$(cat "$TARGET/.ccpo-verl-env")" = "$STAMP" ]; then
  # (run from / so that the answer is the installed ccpo, not a checkout in the working directory)
  INSTALLED=$(cd / && "$TARGET/bin/python" -c 'import ccpo_cli, pathlib; print(pathlib.Path(ccpo_cli.__file__).parent.parent)' 2>/dev/null || true)
  if [ "$INSTALLED" != "$REPO" ]; then
    "$TARGET/bin/python" -m pip --disable-pip-version-check install -q --no-deps -e "$REPO"
    echo "verl_env.sh: $TARGET reused; ccpo now installed from $REPO"
  fi
  echo "verl_env.sh: $TARGET is up to date"
  exit 0
fi

rm -rf "$TARGET"
"$PY" -m venv "$TARGET"
VPY="$TARGET/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24"

# verl-agent's install_requires, read from its setup.py (the GPU extras -- vLLM, flash-attn,
# liger-kernel, sglang -- are extras there and stay out). decord (video decoding, through
# `qwen-vl-utils[decord]`) has no wheel for current Pythons and is not needed for text agents:
# qwen-vl-utils is installed without that extra.
mapfile -t REQS < <("$VPY" - "$SETUP_PY" <<'PYEOF'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in ast.walk(tree):
    if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "install_requires" for t in node.targets):
        for req in ast.literal_eval(node.value):
            print(req.replace("[decord]", ""))
PYEOF
)
# Its requirements.txt adds what the trainer imports on every host (fastapi, uvicorn: the rollout
# server module ray_trainer.py imports); on GPUs vLLM brings them. Pins there that contradict
# setup.py (transformers==, tensordict<=0.6.2) and GPU-only or developer tools stay out.
if [ -f "$VERL_AGENT_HOME/requirements.txt" ]; then
  mapfile -t -O "${#REQS[@]}" REQS < <("$VPY" - "$VERL_AGENT_HOME/requirements.txt" "${REQS[@]}" <<'PYEOF'
import re, sys
def name(req):
    return re.split(r"[\[<>=!~; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")
known = {name(req) for req in sys.argv[2:]}
skip = {"flash-attn", "liger-kernel", "pre-commit", "vllm", "sglang"}
for line in open(sys.argv[1]):
    req = line.split("#", 1)[0].strip()
    if req and name(req) not in known | skip:
        print(req)
PYEOF
)
fi
# Imported by ray_trainer.py's rollout server module on every host but listed nowhere in
# verl-agent: on GPUs they arrive with vLLM.
REQS+=(cachetools openai)
[ "${#REQS[@]}" -gt 0 ] || { echo "verl_env.sh: no install_requires found in $SETUP_PY" >&2; exit 1; }

# CPU torch first; a later bare "torch" requirement must not swap it for a CUDA build.
"${PIP[@]}" install -q torch==2.13.0
"$VPY" - <<'PYEOF'
import sys, torch
if torch.version.cuda is not None:
    sys.exit(f"verl_env.sh: torch {torch.__version__} is a CUDA build; install a CPU wheel of torch==2.13.0 first")
PYEOF

# transformers<=4.57.3 needs huggingface_hub<1.0; without saying so, pip takes the newest
# datasets (which needs hub>=1) and backtracks transformers to 2021 releases that do not build.
CONSTRAINTS="$TARGET/constraints.txt"
printf '%s\n' "torch==2.13.0" "huggingface_hub<1.0" > "$CONSTRAINTS"
"${PIP[@]}" install -q -c "$CONSTRAINTS" "${REQS[@]}"

BEFORE="$TARGET/freeze-verl-agent.txt"
AFTER="$TARGET/freeze-with-ccpo.txt"
"${PIP[@]}" freeze --exclude-editable | sort > "$BEFORE"

# ccpo as a user installs it (plus the verl and integration-test extras), unconstrained: the
# comparison below is the proof that it moved nothing.

"${PIP[@]}" install -q -e "$REPO[verl,verl-test]"
"${PIP[@]}" freeze --exclude-editable | sort > "$AFTER"

# Every package verl-agent resolved keeps its version; ccpo may only add packages.
CHANGED=$(comm -23 "$BEFORE" "$AFTER" || true)
if [ -n "$CHANGED" ]; then
  echo "verl_env.sh: installing ccpo changed versions verl-agent resolved:" >&2
  echo "$CHANGED" >&2
  exit 1
fi
"${PIP[@]}" check
PYTHONPATH="$VERL_AGENT_HOME" "$VPY" -c "import transformers, verl, ccpo_cli; print('transformers', transformers.__version__, 'verl', verl.__version__, 'ccpo_cli', ccpo_cli.__file__)"
echo "$STAMP" > "$TARGET/.ccpo-verl-env"
echo "verl_env.sh: built $TARGET"
