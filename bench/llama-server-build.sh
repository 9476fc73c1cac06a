# Builds llama.cpp's llama-server for bench/vs-llama-server.sh (sourced by it;
# `bench/vs-llama-server.sh --build-only` runs just this part).
#
# The engine is the one svc links: ggml/, src/ (libllama) and include/ of the
# llama.cpp tree vendored in the llama-cpp-sys-2 crate that Cargo.lock pins.
# That crate ships no server sources (tools/server has only its README), so
# everything above llama.h (common/, tools/server, tools/mtmd, vendor/,
# cmake/, the top CMakeLists.txt) comes from the PyPI sdist of
# llama-cpp-python (vendor/llama.cpp), 0.3.36, the newest release and the
# closest to the crate (ggml 0.25.3 against the crate's 0.26.0). If a later
# crate ships tools/server, its own tree is built as it is. The result goes to
# DIR/bin/llama-server with DIR/bin/llama-server.sources saying what it was
# built from; it is rebuilt only when that description changes.
#
# Same build settings as svc's llama.cpp (.cargo/config.toml and
# llama-cpp-sys-2's build script): Release, x86-64-v3 SIMD without
# -march=native, OpenMP (llama.cpp's default, and llama-cpp-2's default
# feature), static libraries; no curl, no OpenSSL, no web UI assets.

llama_server_sdist_version=${BENCH_LLAMA_SERVER_SDIST:-0.3.36}
llama_server_cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
  -DGGML_OPENMP=ON -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
)
# More flags, after (and so over) the ones above, e.g. for a CUDA build next to
# an svc built with shared libraries: "-DGGML_CUDA=ON -DBUILD_SHARED_LIBS=ON".
# shellcheck disable=SC2206
llama_server_cmake_flags+=(${BENCH_LLAMA_SERVER_CMAKE_ARGS:-})

# The llama.cpp directory of the llama-cpp-sys-2 crate svc builds against.
llama_sys_tree() {
  cargo metadata --format-version 1 --locked 2>/dev/null | python3 -c '
import json, os, sys
d = json.load(sys.stdin)
p = [p for p in d["packages"] if p["name"] == "llama-cpp-sys-2"][0]
print(p["version"], os.path.join(os.path.dirname(p["manifest_path"]), "llama.cpp"))'
}

ggml_version() { # ggml's version from a llama.cpp tree's ggml/CMakeLists.txt
  awk '/set\(GGML_VERSION_(MAJOR|MINOR|PATCH)/{gsub(/\)/,"",$2); v = v (v ? "." : "") $2} END{print v}' "$1/ggml/CMakeLists.txt"
}

# llama_server_sources: what build_llama_server builds from, in words.
llama_server_sources() {
  local sys_version sys_tree
  read -r sys_version sys_tree < <(llama_sys_tree)
  if [ -f "$sys_tree/tools/server/CMakeLists.txt" ]; then
    echo "llama.cpp of llama-cpp-sys-2 $sys_version (ggml $(ggml_version "$sys_tree")), server included; ${llama_server_cmake_flags[*]}"
  else
    echo "ggml $(ggml_version "$sys_tree") and libllama of llama-cpp-sys-2 $sys_version (svc's), common/ and tools/server of the llama-cpp-python $llama_server_sdist_version sdist; ${llama_server_cmake_flags[*]}"
  fi
}

# build_llama_server DIR: ensures DIR/bin/llama-server; prints its path.
build_llama_server() {
  local dir=$1 tree want
  want=$(llama_server_sources)
  if [ -x "$dir/bin/llama-server" ] && [ "$(head -n1 "$dir/bin/llama-server.sources" 2>/dev/null)" = "$want" ]; then
    echo "$dir/bin/llama-server"
    return 0
  fi
  command -v cmake >/dev/null || { echo "cmake is missing: bash scripts/setup.sh --build" >&2; return 1; }
  tree=$(llama_server_tree "$dir") || return 1
  mkdir -p "$dir/bin"
  rm -rf "$dir/build"
  echo "building llama-server: $want" >&2
  cmake -S "$tree" -B "$dir/build" "${llama_server_cmake_flags[@]}" >"$dir/build.log" 2>&1 &&
    cmake --build "$dir/build" --target llama-server -j "${BENCH_BUILD_JOBS:-2}" >>"$dir/build.log" 2>&1 ||
    { tail -n 40 "$dir/build.log" >&2; echo "llama-server build failed, log: $dir/build.log" >&2; return 1; }
  install -m 755 "$dir/build/bin/llama-server" "$dir/bin/llama-server"
  echo "$want" >"$dir/bin/llama-server.sources"
  echo "$dir/bin/llama-server"
}

# llama_server_tree DIR: assembles the sources llama-server is built from in
# DIR/src (a tree that needs only cmake and a compiler, so it can be built
# elsewhere: `bench/vs-llama-server.sh --tree-only`); prints its path.
llama_server_tree() {
  local dir=$1 sys_version sys_tree sdist tree src entry
  read -r sys_version sys_tree < <(llama_sys_tree)
  [ -d "$sys_tree/ggml" ] || { echo "llama-cpp-sys-2's llama.cpp not found (cargo fetch first)" >&2; return 1; }
  mkdir -p "$dir/src"
  tree=$dir/src/llama.cpp-sys-$sys_version
  rm -rf "$tree"
  cp -a "$sys_tree" "$tree"
  if [ ! -f "$sys_tree/tools/server/CMakeLists.txt" ]; then
    sdist=$dir/src/llama_cpp_python-$llama_server_sdist_version
    if [ ! -d "$sdist/vendor/llama.cpp/tools/server" ]; then
      echo "fetching the llama-cpp-python $llama_server_sdist_version sdist (server sources)" >&2
      python3 -m pip download -q --no-deps --no-binary :all: \
        "llama-cpp-python==$llama_server_sdist_version" -d "$dir/src" >&2
      tar -xzf "$dir/src/llama_cpp_python-$llama_server_sdist_version.tar.gz" -C "$dir/src"
    fi
    src=$sdist/vendor/llama.cpp
    # Everything above llama.h from the sdist (common/, tools/, vendor/,
    # cmake/, CMakeLists.txt, ...); ggml/, src/ and include/ stay the crate's.
    # The two llama.h differ only in the session/state file versions, and the
    # crate's ggml headers add functions to the sdist's, so the sdist's common
    # and server compile against svc's engine unchanged. Plain cp: new mtimes.
    for entry in "$src"/* "$src"/.[!.]*; do
      [ -e "$entry" ] || continue
      case ${entry##*/} in ggml | src | include) continue ;; esac
      rm -rf "${tree:?}/${entry##*/}"
      cp -r "$entry" "$tree/"
    done
  fi
  echo "$tree"
}
