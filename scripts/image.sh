#!/usr/bin/env bash
# Builds the operator image, vigil:<version>, on a fresh machine, and prints its name.
#
#   scripts/image.sh                 # what `make image` runs
#   PYTHON_IMAGE=python:3.11-slim scripts/image.sh   # a base of your choice (pulled if missing)
#
# 1. Docker: the project's own daemon (e2e/cluster/dockerd.sh; installed and started if needed).
# 2. The base: PYTHON_IMAGE if given; else python:3.11-slim if the daemon already holds it;
#    else a Debian bookworm root with python3, python3-venv and ca-certificates (as the slim
#    image has: the approval notifier's HTTPS needs them), made by debootstrap from Debian's
#    packages (no image registry needed). Its tarball is cached outside the repository
#    (~/.cache/vigil/images, or VIGIL_CACHE/images), so it is made once per machine and only
#    re-imported into a fresh image store. Set VIGIL_DEBIAN_MIRROR to choose the mirror.
# 3. Wheels, built here on the host (pip inside the image build has no network to trust): every
#    dependency with the PostgreSQL extra as binary wheels for CPython 3.11 on manylinux (whatever
#    Python this host runs), and the project's own wheel. Both are kept while their inputs do
#    not change, so a rerun builds nothing but what changed.
# 4. `docker build` with no network at all: the Dockerfile installs the wheels with --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

log() { echo "image: $*" >&2; }
phase_start=$SECONDS
phase() { log "$1 ($((SECONDS - phase_start))s)"; phase_start=$SECONDS; }

py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
cache="${VIGIL_CACHE:-$HOME/.cache/vigil}/images"
work="$repo/.cluster/image-build"  # logs, and the build context ("image" may be a test cluster's)
context="$work/context"            # the build context: wheels/ only
python_version=3.11                # the image's CPython; the wheels are built for it
default_base="python:$python_version-slim"
version="$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
tag="vigil:$version"

DOCKER_HOST="$(e2e/cluster/dockerd.sh up)"
export DOCKER_HOST
phase "docker daemon at $DOCKER_HOST"

# --- the base image -------------------------------------------------------------------------

debian_base() { # the Debian base image's name; made (debootstrap) or re-imported when missing
  local suite=bookworm packages=python3,python3-venv,ca-certificates
  local recipe=1  # bump when make_debian_root changes what it makes
  local key
  key="$(echo "$suite $packages $recipe" | sha256sum | cut -c1-12)"
  local name="vigil-python:$python_version-$suite-$key"
  local tarball="$cache/debian-$suite-python$python_version-$key.tar"
  if docker image inspect "$name" >/dev/null 2>&1; then echo "$name"; return; fi
  if [ ! -f "$tarball" ]; then
    make_debian_root "$suite" "$packages" "$tarball"
    phase "made the Debian $suite base with debootstrap: $tarball ($(du -h "$tarball" | cut -f1))"
  fi
  docker import --change 'CMD ["python3"]' \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tarball" "$name" >/dev/null
  phase "imported $name"
  echo "$name"
}

make_debian_root() { # make_debian_root <suite> <packages> <tarball>
  local suite="$1" packages="$2" tarball="$3"
  if ! command -v debootstrap >/dev/null; then
    [ "$(id -u)" = 0 ] || { log "debootstrap is missing: install it with your package manager"; exit 1; }
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends debootstrap >/dev/null
  fi
  mkdir -p "$cache"
  local root
  root="$(mktemp -d "$cache/root.XXXXXX")"
  log "debootstrap $suite with $packages (a few minutes, once per machine; log: $root.log)"
  # minbase: dpkg, apt and the essential set only; the image runs one Python program.
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" ${VIGIL_DEBIAN_MIRROR:-} >"$root.log" 2>&1; then
    tail -n 20 "$root.log" >&2
    log "debootstrap failed; the whole log is $root.log"
    rm -rf "$root"
    exit 1
  fi
  # What a container never reads: package lists and caches, manuals, translations.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/log/*
  tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root" "$root.log"
}

if [ -n "${PYTHON_IMAGE:-}" ]; then
  base="$PYTHON_IMAGE"
elif docker image inspect "$default_base" >/dev/null 2>&1; then
  base="$default_base"
else
  base="$(debian_base)"
fi
phase "base image: $base"

# --- the wheels -----------------------------------------------------------------------------

arch="$(uname -m)"
# The project's runtime requirements with the postgres extra, one a line, from pyproject.toml.
requirements="$("$py" -c '
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["postgres"]))')"
deps_key="$(echo "$requirements $python_version $arch" | sha256sum | cut -c1-16)"
deps="$context/wheels/deps"
if [ "$(cat "$deps/.key" 2>/dev/null)" != "$deps_key" ]; then
  rm -rf "$deps" && mkdir -p "$deps"
  # Binary wheels only, for the image's interpreter and platform rather than the host's. pip
  # matches --platform exactly (no older manylinux implied), so each glibc baseline up to 2.28
  # is named; all are older than both bases' glibc (bookworm's is 2.36).
  mapfile -t reqs <<<"$requirements"
  platforms=()
  for p in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
    platforms+=(--platform "${p}_$arch")
  done
  "$py" -m pip download --quiet --disable-pip-version-check --dest "$deps" \
    --only-binary=:all: --implementation cp --python-version "$python_version" \
    --abi "cp${python_version/./}" "${platforms[@]}" "${reqs[@]}"
  echo "$deps_key" >"$deps/.key"
  phase "downloaded $(ls "$deps"/*.whl | wc -l) dependency wheels into $deps"
fi

# The project's wheel, rebuilt when a file it is made of changes.
src_key="$(find operator pyproject.toml README.md -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' -print0 \
  | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
own="$context/wheels/vigil"
if [ "$(cat "$own/.key" 2>/dev/null)" != "$src_key" ]; then
  rm -rf "$own" && mkdir -p "$own"
  src="$(mktemp -d)"  # built from a copy: setuptools leaves build/ and *.egg-info where it runs
  trap 'rm -rf "$src"' EXIT
  tar -cf - --exclude=__pycache__ --exclude='*.egg-info' operator pyproject.toml README.md | tar -C "$src" -xf -
  if ! "$py" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$own" "$src" >"$work/wheel.log" 2>&1; then
    cat "$work/wheel.log" >&2
    exit 1
  fi
  echo "$src_key" >"$own/.key"
  phase "built $(basename "$own"/*.whl)"
fi

# --- the image ------------------------------------------------------------------------------

build() { # build <tag> [docker build options...]
  local name="$1"
  shift
  # The classic builder (BuildKit needs the buildx plugin); no network: nothing is fetched.
  if ! DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" docker build --network none \
    --file Dockerfile --build-arg PYTHON_IMAGE="$base" --tag "$name" "$@" "$context" >>"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    log "docker build failed; the whole log is $work/build.log"
    exit 1
  fi
}
: >"$work/build.log"
# The builder stage gets a name of its own, so the prune below keeps it: it is the next build's
# cache. What the prune removes is what earlier builds left untagged (their builders, the images
# a new one replaced), ~0.7 GB per source change otherwise.
build "vigil-builder:$version" --target builder
build "$tag" --label org.opencontainers.image.version="$version"
docker image prune --force >/dev/null
for old in $(docker image ls --format '{{.Repository}}:{{.Tag}}' vigil-python); do
  [ "$old" = "$base" ] || docker image rm "$old" >/dev/null  # bases of an earlier recipe
done
phase "built $tag: $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}')"
echo "$tag"
