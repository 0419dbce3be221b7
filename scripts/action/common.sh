# Shared by the action's scripts: input checks that fail with one clear line (exit 2).

fail() {  # one line, as a GitHub error annotation, exit 2 (bad input)
  echo "::error::simcluster action: $*" >&2
  exit 2
}

input() {  # input NAME DEFAULT: the value of INPUT_NAME, trimmed, or DEFAULT when empty
  local var="INPUT_$1" value
  value="${!var:-}"
  value="${value#"${value%%[![:space:]]*}"}"
  value="${value%"${value##*[![:space:]]}"}"
  printf '%s' "${value:-$2}"
}

input_choice() {  # input_choice NAME DEFAULT ALLOWED...
  local name="$1" value
  value="$(input "$1" "$2")"
  shift 2
  for allowed in "$@"; do [ "$value" = "$allowed" ] && { printf '%s' "$value"; return; }; done
  fail "input '$(echo "$name" | tr 'A-Z_' 'a-z-')' must be one of: $*; got '$value'"
}

input_bool() {
  local value
  value="$(input "$1" "$2" | tr 'A-Z' 'a-z')"
  case "$value" in
    true|yes|1) printf true ;;
    false|no|0) printf false ;;
    *) fail "input '$(echo "$1" | tr 'A-Z_' 'a-z-')' must be true or false; got '$value'" ;;
  esac
}

run() {  # run a command, or only print it under SIMCLUSTER_ACTION_DRY_RUN=1
  if [ "${SIMCLUSTER_ACTION_DRY_RUN:-}" = 1 ]; then echo "+ $*"; else "$@"; fi
}

decide_sudo() {  # decide_sudo MODE BACKEND: set sudo_used to whether `simcluster up` runs as root through sudo
  # MODE is the input 'sudo' (auto|true|false). Root needs none; docker clusters need the
  # engine, not root (the runner's user is in the docker group), so auto escalates only local
  # clusters, and only where sudo asks for no password (GitHub's hosted runners). Called
  # directly (not in $(...)), so that 'true' which cannot be met stops the step (exit 2).
  # shellcheck disable=SC2034  # read by the scripts that source this file
  sudo_used=false
  if [ "$(id -u)" = 0 ] || [ "$1" = false ]; then return; fi
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    # shellcheck disable=SC2034
    if [ "$1" = true ] || [ "$2" = local ]; then sudo_used=true; fi
  elif [ "$1" = true ]; then
    fail "input 'sudo' is true, but $(id -un) cannot run sudo without a password on this runner"
  fi
}
