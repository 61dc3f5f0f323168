#!/usr/bin/env bash
# The Kubernetes manifests (deploy/k8s), checked offline: no cluster, no image pulled.
#   1. every overlay renders with `kubectl kustomize` — the kubectl on the PATH, or
#      Debian's kubernetes-client (kubectl 1.20, kustomize 2.0.3), which
#      scripts/install-deps.sh installs when there is none; the manifests are written for
#      both that kustomize and kustomize 5;
#   2. every rendered overlay passes `kubernetes-validate --strict` against Kubernetes
#      $K8S_VERSION's schemas: every kind and field exists there, with its type, and no field
#      is unknown (a misspelled one would be dropped by a lenient `kubectl apply`, silently);
#   3. the validator does catch a wrong field: each misspelling below is put into a copy of a
#      rendered overlay, and the check fails unless the validator refuses the copy.
# crates/seckill/tests/contract/k8s.rs checks what a schema cannot: the flags are the
# service's, the Nginx config is the project's, the image and port are the Dockerfile's.
#
#   scripts/k8s-check.sh
#   K8S_VERSION=1.33 scripts/k8s-check.sh           another Kubernetes version's schemas
#   COMPARE_WITH=/path/to/other/kubectl scripts/k8s-check.sh
#                                                   also render with that kubectl, and fail
#                                                   unless both render the same objects
#
# kubernetes-validate (PyPI; its schemas ship with it) is installed in a virtualenv under
# ./run/k8s-venv when missing.
#
# Why Kubernetes 1.30 by default: the oldest version the manifests are meant for. A field
# that only a newer API server knows fails against 1.30's schemas, and everything they use
# (apps/v1, batch/v1, policy/v1, autoscaling/v2, networking.k8s.io/v1) has been stable since
# 1.23, so what passes for 1.30 is taken by the versions after it.
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=${K8S_VERSION:-1.30}
VENV=${K8S_VENV:-$PWD/run/k8s-venv}

if ! command -v kubectl >/dev/null 2>&1; then
  scripts/install-deps.sh
fi
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  echo "installing kubernetes-validate into $VENV" >&2
  python3 -m venv "$VENV"
  # 1.34 to 1.37 all ship the schemas of Kubernetes 1.25 and later.
  "$VENV/bin/pip" install --quiet "kubernetes-validate>=1.34,<1.38"
fi
validate() { "$VENV/bin/kubernetes-validate" --strict -k "$K8S_VERSION" "$@"; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# kustomize 5 warns that `bases` is deprecated; it is what kustomize 2.0.3 needs for a
# directory, so the warning is expected and left out.
render() { # kubectl overlay -> the rendered overlay on stdout
  "$1" kustomize "deploy/k8s/overlays/$2" 2> >(grep -v "'bases' is deprecated" >&2)
}

echo "kubectl: $(command -v kubectl) ($(kubectl version --client 2>/dev/null | head -1))"
echo "kubernetes-validate $("$VENV/bin/pip" show kubernetes-validate | sed -n 's/^Version: //p'), --strict -k $K8S_VERSION"
for overlay in deploy/k8s/overlays/*/; do
  overlay=$(basename "$overlay")
  render kubectl "$overlay" >"$dir/$overlay.yaml"
  if ! validate "$dir/$overlay.yaml" >"$dir/$overlay.out" 2>&1; then
    cat "$dir/$overlay.out"
    echo "FAIL: $overlay does not validate against Kubernetes $K8S_VERSION" >&2
    exit 1
  fi
  resources=$(sed -n 's/.* passed for resource \([^ ]*\) .*/\1/p' "$dir/$overlay.out" | tr '\n' ' ')
  echo "ok: $overlay renders, and its $(wc -w <<<"$resources") resources validate: $resources"

  if [ -n "${COMPARE_WITH:-}" ]; then
    # The generated ConfigMaps' and Secrets' name suffixes are hashes, computed differently
    # by each kustomize; kustomize 2.0.3 also writes empty annotations and labels on a
    # merged ConfigMap. Past those, the two must agree.
    render "$COMPARE_WITH" "$overlay" >"$dir/$overlay.other.yaml"
    normalize() { sed -E -e 's/-[a-z0-9]{10}$//' -e '/^  (annotations|labels): \{\}$/d' "$1"; }
    if ! diff <(normalize "$dir/$overlay.yaml") <(normalize "$dir/$overlay.other.yaml"); then
      echo "FAIL: $overlay renders differently with $COMPARE_WITH" >&2
      exit 1
    fi
    echo "ok: $overlay renders the same with $COMPARE_WITH ($("$COMPARE_WITH" version --client 2>/dev/null | head -1))"
  fi
done

# Each misspelling: the object (kind/name as the validator names it), the line as rendered,
# the line misspelled. Each must be refused.
mistakes=(
  "deployment/nginx|  replicas: 2|  replica: 2"
  "deployment/seckill|        readinessProbe:|        readinessProbes:"
)
for mistake in "${mistakes[@]}"; do
  IFS='|' read -r object right wrong <<<"$mistake"
  python3 - "$dir/cluster.yaml" "$dir/wrong.yaml" "$object" "$right" "$wrong" <<'PY'
import sys
source, target, obj, right, wrong = sys.argv[1:]
kind, name = obj.split("/")
docs = open(source).read().split("\n---\n")
hits = [i for i, d in enumerate(docs)
        if f"\nkind: {kind}\n".lower() in f"\n{d}\n".lower() and f"\n  name: {name}\n" in d]
assert len(hits) == 1, f"one {obj} in the rendered overlay, found {len(hits)}"
doc = docs[hits[0]]
assert f"\n{right}\n" in doc, f"{obj} has no line {right!r}"
docs[hits[0]] = doc.replace(f"\n{right}\n", f"\n{wrong}\n", 1)
open(target, "w").write("\n---\n".join(docs))
PY
  shown=$(sed -E 's/^ +//' <<<"$wrong")
  if validate --quiet "$dir/wrong.yaml" >"$dir/wrong.out" 2>&1; then
    echo "FAIL: kubernetes-validate --strict passed $object with '$shown'" >&2
    exit 1
  fi
  echo "ok: a wrong field is caught: $object with '$shown' is refused ($(grep -o "Additional properties.*" "$dir/wrong.out" | head -1))"
done
