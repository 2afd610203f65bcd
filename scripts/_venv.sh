# Sourced by scripts/serve and scripts/test: make sure .venv exists and holds the project with the
# given extras. Reinstalls only when pyproject.toml changed since the last install (a stamp file).
# Needs only python3 (>= 3.11) on the machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MINIBROKER_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

ensure_venv() {
    local extras="$1"
    local python="${PYTHON:-python3}"
    if [ ! -x "$PY" ]; then
        "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
            echo "minibroker needs Python >= 3.11; $python is $("$python" --version 2>&1)" >&2
            exit 1
        }
        echo "creating $VENV" >&2
        "$python" -m venv "$VENV"
    fi
    local stamp="$VENV/.minibroker-installed-$extras"
    local want
    want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "installing minibroker${extras:+[$extras]} into $VENV" >&2
        "$PY" -m pip install --quiet --disable-pip-version-check -e "$ROOT${extras:+[$extras]}"
        echo "$want" > "$stamp"
    fi
    # Client interop tests: a JDK >= 17 (so install_java.sh below finds Java) plus the Java clients'
    # jars from Maven Central; the Go clients' driver built from the Go module proxy; kafkajs from npm.
    case ",$extras," in *,test,*)
        PY="$PY" bash "$ROOT/scripts/fetch_java_clients" || echo "fetch_java_clients failed: the Java interop tests will fail" >&2
        bash "$ROOT/scripts/fetch_go_clients" || echo "fetch_go_clients failed: the Go interop tests will fail" >&2
        bash "$ROOT/scripts/fetch_node_clients" || echo "fetch_node_clients failed: the Node interop tests will fail" >&2
        ;;
    esac
    case ",$extras," in
        *,test,* | *,pipeline,*) bash "$ROOT/scripts/install_java.sh" ;;  # PySpark needs Java >= 17
    esac
    # Apache Kafka itself, the conformance corpus's reference (tests/conformance/). Once asked for,
    # a reference that is missing fails the corpus instead of skipping it (MINIBROKER_REQUIRE_KAFKA).
    case ",$extras," in *,test,*)
        export MINIBROKER_REQUIRE_KAFKA=1
        bash "$ROOT/scripts/install_kafka" || echo "install_kafka failed: the conformance corpus will fail" >&2 ;;
    esac
}
