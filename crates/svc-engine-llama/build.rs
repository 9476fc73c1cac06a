//! Records which x86 SIMD extensions llama.cpp is compiled with, so the
//! engine can check the CPU for exactly those before it calls into llama.cpp,
//! and compiles svc's attention kernel (`kernel/attention.cpp`) against the
//! llama.cpp that llama-cpp-sys-2 built, with the same SIMD flags.
//!
//! The `llama-cpp-sys-2` build script forwards every `GGML_*` environment
//! variable to CMake (the workspace sets them in `.cargo/config.toml`); where
//! one is unset, ggml's own default applies: SSE4.2, AVX, AVX2, BMI2, FMA and
//! F16C on, unless `SOURCE_DATE_EPOCH` is set (then ggml turns them off).

use std::env;
use std::path::{Path, PathBuf};

/// `GGML_*` option, the `is_x86_feature_detected!` name, ggml's default,
/// the compiler flags ggml gives its CPU code for it.
const OPTIONS: &[(&str, &str, bool, &[&str])] = &[
    ("GGML_SSE42", "sse4.2", true, &["-msse4.2"]),
    ("GGML_AVX", "avx", true, &["-mavx"]),
    ("GGML_AVX2", "avx2", true, &["-mavx2"]),
    ("GGML_BMI2", "bmi2", true, &["-mbmi2"]),
    ("GGML_FMA", "fma", true, &["-mfma"]),
    ("GGML_F16C", "f16c", true, &["-mf16c"]),
    ("GGML_AVX_VNNI", "avxvnni", false, &["-mavxvnni"]),
    (
        "GGML_AVX512",
        "avx512f",
        false,
        &[
            "-mavx512f",
            "-mavx512cd",
            "-mavx512vl",
            "-mavx512dq",
            "-mavx512bw",
        ],
    ),
    ("GGML_AVX512_VBMI", "avx512vbmi", false, &["-mavx512vbmi"]),
    ("GGML_AVX512_VNNI", "avx512vnni", false, &["-mavx512vnni"]),
    ("GGML_AVX512_BF16", "avx512bf16", false, &["-mavx512bf16"]),
];

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let defaults_on = env::var_os("SOURCE_DATE_EPOCH").is_none();
    let mut features = Vec::new();
    let mut flags = Vec::new();
    for &(option, feature, default, option_flags) in OPTIONS {
        println!("cargo:rerun-if-env-changed={option}");
        let on = match env::var(option) {
            Ok(value) => matches!(
                value.to_ascii_uppercase().as_str(),
                "ON" | "1" | "TRUE" | "YES" | "Y"
            ),
            Err(_) => default && defaults_on,
        };
        if on {
            features.push(feature);
            flags.extend_from_slice(option_flags);
        }
    }
    // `-C target-cpu=native` makes llama-cpp-sys-2 build ggml with
    // GGML_NATIVE ("whatever the build machine has"): nothing to check.
    let native = env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|flags| {
        flags
            .split('\x1f')
            .any(|f| f.ends_with("target-cpu=native"))
    });
    let value = if native {
        "native".to_owned()
    } else {
        features.join(",")
    };
    println!("cargo:rustc-env=SVC_LLAMA_CPU_FEATURES={value}");

    let x86 = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64" || a == "x86");
    let flags: &[&str] = match (x86, native) {
        (false, _) => &[],
        (true, true) => &["-march=native"],
        (true, false) => &flags,
    };
    if let Err(why) = compile_kernel(flags) {
        // Cargo stops the build with this message.
        println!("cargo::error=svc-engine-llama: {why}");
    }
}

/// Compiles svc's kernels (`kernel/attention.cpp`, `kernel/product.cpp`)
/// with ggml's CPU backend's include directories (from the llama.cpp
/// sources llama-cpp-sys-2 built) and `flags`, into a static library linked
/// before llama.cpp's.
fn compile_kernel(flags: &[&str]) -> Result<(), String> {
    println!("cargo:rerun-if-changed=kernel");
    let ggml = llama_cpp_sources()?.join("ggml");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("kernel/attention.cpp")
        .file("kernel/product.cpp")
        .include(ggml.join("include"))
        .include(ggml.join("src"))
        .include(ggml.join("src/ggml-cpu"))
        .opt_level(3)
        .warnings(true)
        .flag_if_supported("-Wno-unused-function")
        .flag_if_supported("-Wno-pedantic");
    for flag in flags {
        build.flag(flag);
    }
    build
        .try_compile("svc_kernels")
        .map_err(|e| format!("cannot compile svc's kernels (kernel/): {e}"))
}

/// The llama.cpp source tree llama-cpp-sys-2 configured: CMake's cache in
/// its build directory names it (llama-cpp-sys-2 says where its CMake
/// package lies, `DEP_LLAMA_GGML_CMAKE_DIR`, under the same output
/// directory).
fn llama_cpp_sources() -> Result<PathBuf, String> {
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_GGML_CMAKE_DIR");
    let cmake_dir = env::var_os("DEP_LLAMA_GGML_CMAKE_DIR")
        .ok_or("llama-cpp-sys-2 did not say where it built llama.cpp (DEP_LLAMA_GGML_CMAKE_DIR)")?;
    // <out>/lib/cmake (or lib64/cmake) -> <out>/build/CMakeCache.txt
    let out = Path::new(&cmake_dir)
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let cache = out.join("build").join("CMakeCache.txt");
    let text = std::fs::read_to_string(&cache)
        .map_err(|e| format!("cannot read {}: {e}", cache.display()))?;
    let home = text
        .lines()
        .find_map(|line| line.strip_prefix("CMAKE_HOME_DIRECTORY:INTERNAL="))
        .ok_or_else(|| format!("{} names no source directory", cache.display()))?;
    let home = PathBuf::from(home);
    if !home.join("ggml/src/ggml-cpu/simd-gemm.h").is_file() {
        return Err(format!(
            "{} has no ggml/src/ggml-cpu/simd-gemm.h: the kernel in kernel/attention.cpp \
             was written for another llama.cpp (see the workspace Cargo.toml)",
            home.display()
        ));
    }
    Ok(home)
}
