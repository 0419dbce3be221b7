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

use_sudo() {  # use_sudo BACKEND: print true when `simcluster up` should run as root through sudo
  # Input 'sudo' (auto|true|false). Root needs none; docker clusters need the engine, not root
  # (the runner's user is in the docker group), so auto escalates only local clusters, and
  # only where sudo asks for no password (GitHub's hosted runners). Exit 2 when 'true' cannot.
  local mode
  mode="$(input_choice SUDO auto auto true false)"
  if [ "$(id -u)" = 0 ] || [ "$mode" = false ]; then printf false; return; fi
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    if [ "$mode" = true ] || [ "$1" = local ]; then printf true; else printf false; fi
  elif [ "$mode" = true ]; then
    fail "input 'sudo' is true, but $(id -un) cannot run sudo without a password on this runner"
  else
    printf false
  fi
}
