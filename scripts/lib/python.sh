# Finds the Python that archiver's scripts build their virtualenv with. Sourced by
# scripts/start.sh and scripts/test.sh; uses only bash built-ins besides the candidates
# themselves (tests/test_scripts.py runs it with a PATH of stub interpreters).
#
#   find_python    prints the interpreter to use, or explains what to install and fails:
#                  $ARCHIVER_PYTHON when set (it must be 3.11 or newer), else the first
#                  of python3.13, python3.12, python3.11, python3 that runs and is >= 3.11.
#   venv_package_missing PY   prints the Debian/Ubuntu package PY needs to create a
#                  virtualenv (python3.X-venv), or nothing (and fails) when it can already.

ARCHIVER_PYTHON_MIN=(3 11)
ARCHIVER_PYTHON_CANDIDATES=(python3.13 python3.12 python3.11 python3)

# "3.12" for a working interpreter; nothing (and failure) for a missing or broken one,
# such as a pyenv shim whose version is not selected.
python_version_of() {
    local version
    version=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 1
    [[ $version =~ ^[0-9]+\.[0-9]+$ ]] || return 1
    printf '%s\n' "$version"
}

python_is_recent() {
    local major=${1%%.*} minor=${1#*.}
    ((major > ARCHIVER_PYTHON_MIN[0] || (major == ARCHIVER_PYTHON_MIN[0] && minor >= ARCHIVER_PYTHON_MIN[1])))
}

find_python() {
    local candidate version seen=()
    if [[ -n ${ARCHIVER_PYTHON:-} ]]; then
        if ! version=$(python_version_of "$ARCHIVER_PYTHON"); then
            printf 'ARCHIVER_PYTHON=%s does not run as a Python interpreter\n' "$ARCHIVER_PYTHON" >&2
            return 1
        fi
        if ! python_is_recent "$version"; then
            printf 'ARCHIVER_PYTHON=%s is Python %s; archiver needs %s.%s or newer\n' \
                "$ARCHIVER_PYTHON" "$version" "${ARCHIVER_PYTHON_MIN[@]}" >&2
            return 1
        fi
        printf '%s\n' "$ARCHIVER_PYTHON"
        return 0
    fi
    for candidate in "${ARCHIVER_PYTHON_CANDIDATES[@]}"; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        if ! version=$(python_version_of "$candidate"); then
            seen+=("$candidate (does not run)")
            continue
        fi
        if python_is_recent "$version"; then
            printf '%s\n' "$candidate"
            return 0
        fi
        seen+=("$candidate ($version)")
    done
    {
        printf 'archiver needs Python %s.%s or newer, and found ' "${ARCHIVER_PYTHON_MIN[@]}"
        if ((${#seen[@]})); then
            local item list=""
            for item in "${seen[@]}"; do list+="${list:+, }$item"; done
            printf 'only %s\n' "$list"
        else
            printf 'none of %s on PATH\n' "${ARCHIVER_PYTHON_CANDIDATES[*]}"
        fi
        printf 'Install one, then run this again:\n'
        printf '  Debian 12 (3.11), Debian 13 (3.13), Ubuntu 24.04 (3.12): apt-get install python3 python3-venv\n'
        printf '  Ubuntu 22.04 and other systems: install Python 3.11 or newer (e.g. from python.org,\n'
        printf '  or apt-get install python3.11 python3.11-venv from the deadsnakes PPA)\n'
        printf 'or point ARCHIVER_PYTHON at one: ARCHIVER_PYTHON=/opt/python3.12/bin/python3.12\n'
    } >&2
    return 1
}

# Debian and Ubuntu ship venv's ensurepip in a package of its own (python3.X-venv).
venv_package_missing() {
    "$1" -c 'import ensurepip, venv' >/dev/null 2>&1 && return 1
    local version
    version=$(python_version_of "$1") || version=3
    printf 'python%s-venv\n' "$version"
}
