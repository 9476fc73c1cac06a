//! Batch-invariant numerics: a token's logits are the same bits whether it
//! is decoded alone, beside other sequences, or inside a prompt chunk.
//!
//! On the CPU, llama.cpp's flash attention has three kernels. A batch of
//! one query token over 512 cells or more splits the cells across threads
//! and merges the partial sums; a batch of many query tokens (a prompt
//! chunk, or many streams at once) takes a tiled kernel; other batches take
//! a vector kernel that visits a query's cells one by one, in pool order.
//! Each sums in its own order, so the same token's attention differs in the
//! last bits with what else is in the batch, and a greedy or seeded reply
//! can change after a long prompt (issue 32). svc brings its own kernel
//! (`kernel/attention.cpp`, compiled by this crate's build script against
//! the llama.cpp it links): one order of sums for every query however it
//! is batched, tiled over the query's own visible cells so that where they
//! lie in the pool changes nothing (the engine keeps each sequence's cells
//! in position order, see the scheduler), with the K and V rows of a tile
//! shared by the queries of a prompt chunk and by the query heads of a KV
//! head. The CPU backend of each invariant context runs it for every
//! flash-attention node ([`Kernels`]).
//!
//! The matrix products need the same care. On x86, ggml multiplies a row
//! by one token with its dot product, block after block; for several
//! tokens it may take other kernels that sum in other orders: llamafile's
//! tiles from two tokens (F32, F16, BF16, Q4_0, Q5_0, IQ4_NL; Q8_0 too, but
//! those sum as the dot product does: the same fused multiply-adds block
//! after block and the same horizontal sum), its tiled K-quant kernel from
//! eight (Q2_K to Q6_K and the i-quants), and for the rows it repacks at
//! load time for this CPU (Q4_0, Q4_K, IQ4_NL and MXFP4 on AVX2) the
//! repacked kernels from four. So an invariant engine loads its model with
//! every row as the file stores it ([`with_plain_weights`]), and its
//! backend gives every matrix of a type summed otherwise, and of Q4_1, to
//! svc's own product (`kernel/product.cpp`): the same bits as ggml's dot
//! product for every token, for Q4_0, Q4_1, Q5_0, IQ4_NL, IQ4_XS and Q2_K
//! to Q6_K rows (the default model's, a Q4_0, IQ4_NL or IQ4_XS file's, and
//! the K-quant files', whose smaller matrices are often Q4_0 or Q5_0) with each row
//! unpacked once for a strip of tokens (ggml unpacks it again for every
//! token; IQ4_NL rows of an odd number of blocks excepted), for the other types by
//! calling ggml's dot product token after token; a mixture of experts'
//! matrices (MUL_MAT_ID, whose K-quant and i-quant experts the tiled kernel
//! also takes) likewise, each expert by the tokens routed to it. Q8_0, Q5_1
//! and MXFP4 rows keep ggml's kernels, which sum alike. ggml's reference
//! kernels (`ggml_backend_cpu_set_use_ref`: the dot product for every
//! batch, no operator fusion; slower for prompts) remain for the
//! attention's products when flash attention is off, and for a build
//! without AVX2, FMA and F16C.
//!
//! llama.cpp makes the context's CPU backend itself and offers no way to
//! reach it, so the CPU device's `init_backend` entry is wrapped once, when
//! the backend starts: each CPU backend made while the calling thread has
//! asked for invariant kernels ([`with_kernels`]) gets them. The wrap
//! checks the device table's layout first (its name and type entries give
//! what ggml's own accessors give, and the entry it replaces makes a CPU
//! backend) and is not installed when any of that fails. The CPU
//! registry's `get_proc_address` entry is wrapped the same way (checked by
//! its name, device-count and own entries), so that a model loaded while
//! the calling thread asked for plain weights finds no repacking buffer
//! type.

#![expect(
    unsafe_code,
    reason = "wrapping an entry of ggml's CPU device table: llama.cpp offers no way to reach the context's CPU backend"
)]

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};
use std::path::Path;
use std::sync::OnceLock;

use llama_cpp_sys_2 as sys;

type InitBackend =
    unsafe extern "C" fn(sys::ggml_backend_dev_t, *const c_char) -> sys::ggml_backend_t;
type GetName = unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *const c_char;
type GetType = unsafe extern "C" fn(sys::ggml_backend_dev_t) -> sys::ggml_backend_dev_type;

/// Entries of ggml's `ggml_backend_device_i`, in declaration order.
const GET_NAME: usize = 0;
const GET_TYPE: usize = 3;
const INIT_BACKEND: usize = 5;

type GetProcAddress = unsafe extern "C" fn(sys::ggml_backend_reg_t, *const c_char) -> *mut c_void;
type RegName = unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *const c_char;
type RegDeviceCount = unsafe extern "C" fn(sys::ggml_backend_reg_t) -> usize;

/// Entries of ggml's `ggml_backend_reg_i`, in declaration order; the table
/// follows the registry's `int api_version`, at a pointer's alignment.
const REG_GET_NAME: usize = 0;
const REG_DEVICE_COUNT: usize = 1;
const REG_GET_PROC_ADDRESS: usize = 3;

/// The function llama.cpp asks the CPU registry for when it lists the
/// buffer types a model's weights may go to besides plain host memory.
const EXTRA_BUFTS: &CStr = c"ggml_backend_dev_get_extra_bufts";

/// Whether the wraps are installed, or why not.
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
/// The CPU device's own `init_backend`, set before the wrap replaces it.
static ORIGINAL: OnceLock<InitBackend> = OnceLock::new();
/// The CPU registry's own `get_proc_address`, set before the wrap replaces it.
static ORIGINAL_PROC_ADDRESS: OnceLock<GetProcAddress> = OnceLock::new();

unsafe extern "C" {
    /// Makes a CPU backend run svc's attention kernel for its
    /// flash-attention nodes (`kernel/attention.cpp`); false where this
    /// build has no kernel or `backend` is not a CPU backend.
    fn svc_attention_adopt(backend: sys::ggml_backend_t) -> bool;
    /// Whether this build has svc's matrix products (`kernel/product.cpp`:
    /// AVX2, FMA and F16C).
    fn svc_product_available() -> bool;
}

#[cfg(any(test, feature = "testing"))]
unsafe extern "C" {
    /// Flash-attention nodes given to svc's kernel so far (by every engine).
    fn svc_attention_nodes() -> u64;
    /// Matrix products given to svc's product kernel so far (by every engine).
    fn svc_product_nodes() -> u64;
    /// How many of them were a mixture of experts' (MUL_MAT_ID).
    fn svc_mixture_nodes() -> u64;
}

/// Flash-attention nodes svc's kernel has been given to compute so far, by
/// every engine of the process.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn attention_kernel_nodes() -> u64 {
    // SAFETY: reads an atomic counter.
    unsafe { svc_attention_nodes() }
}

/// Matrix products svc's product kernel (`kernel/product.cpp`) has been
/// given to compute so far, by every engine of the process.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn product_kernel_nodes() -> u64 {
    // SAFETY: reads atomic counters.
    unsafe { svc_product_nodes() }
}

/// How many of those were a mixture of experts' products (MUL_MAT_ID).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn mixture_kernel_nodes() -> u64 {
    // SAFETY: reads an atomic counter.
    unsafe { svc_mixture_nodes() }
}

/// The kernels of a context's CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernels {
    /// llama.cpp's own, whatever they sum in which order (batch
    /// invariance off).
    Fastest,
    /// svc's attention kernel, llama.cpp's other kernels: for weights
    /// whose matrix products sum alike for one token and for many.
    Attention,
    /// svc's attention kernel and ggml's reference kernels for the rest.
    Reference,
}

impl Kernels {
    /// The kernels that keep a model's numerics batch-invariant (or the
    /// fastest when `batch_invariant` is off), from the types of the
    /// matrices in `weights` (the file llama.cpp loads). With flash
    /// attention off, the attention is matrix products too.
    pub(crate) fn for_model(
        weights: &Path,
        batch_invariant: bool,
        flash_attention: Option<bool>,
    ) -> Kernels {
        if !batch_invariant {
            return Kernels::Fastest;
        }
        if flash_attention == Some(false) {
            return Kernels::Reference;
        }
        // SAFETY: reads a constant of svc's kernels.
        let products = unsafe { svc_product_available() };
        // Every matrix (a mixture of experts' too) sums alike for one token
        // and for many, or takes svc's product.
        let kept = |t: &svc_gguf::TensorInfo| {
            t.dims.iter().filter(|&&d| d > 1).count() < 2
                || products
                || !summed_otherwise(t.ggml_type)
        };
        match svc_gguf::GgufHeader::read(weights) {
            Ok(header) if header.tensors.iter().all(kept) => Kernels::Attention,
            _ => Kernels::Reference,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernels::Fastest => "llama.cpp",
            Kernels::Attention => "svc attention, rows as stored",
            Kernels::Reference => "svc attention, rows as stored, reference matrix products",
        }
    }
}

/// ggml types whose matrices llamafile's tiles multiply from two tokens in
/// another order than ggml's dot product does for one (Q8_0, which they
/// also take, sums alike).
const TILES: [sys::ggml_type; 6] = [
    sys::GGML_TYPE_F32,
    sys::GGML_TYPE_F16,
    sys::GGML_TYPE_BF16,
    sys::GGML_TYPE_Q4_0,
    sys::GGML_TYPE_Q5_0,
    sys::GGML_TYPE_IQ4_NL,
];

/// The types of ggml's tiled K-quant kernel (`ggml-cpu/tiled`), which
/// multiplies their matrices from eight tokens in another order than the
/// dot product, and the experts of a mixture-of-experts model (MUL_MAT_ID)
/// from eight tokens an expert. svc's product (`kernel/product.cpp`) takes
/// the matrices of these types and of [`TILES`], plain (MUL_MAT) or a
/// mixture's (MUL_MAT_ID), with ggml's one-token bits (a build without it
/// takes ggml's reference kernels for them).
const TILED: [sys::ggml_type; 13] = [
    sys::GGML_TYPE_Q2_K,
    sys::GGML_TYPE_Q3_K,
    sys::GGML_TYPE_Q4_K,
    sys::GGML_TYPE_Q5_K,
    sys::GGML_TYPE_Q6_K,
    sys::GGML_TYPE_IQ4_XS,
    sys::GGML_TYPE_IQ2_XXS,
    sys::GGML_TYPE_IQ2_XS,
    sys::GGML_TYPE_IQ2_S,
    sys::GGML_TYPE_IQ3_XXS,
    sys::GGML_TYPE_IQ3_S,
    sys::GGML_TYPE_IQ1_S,
    sys::GGML_TYPE_IQ1_M,
];

/// Whether ggml multiplies matrices of type `ty` by several tokens in
/// another order than its dot product does for one.
fn summed_otherwise(ty: sys::ggml_type) -> bool {
    TILES.contains(&ty) || TILED.contains(&ty)
}

thread_local! {
    /// The kernels CPU backends made on this thread get.
    static KERNELS: Cell<Kernels> = const { Cell::new(Kernels::Fastest) };
    /// Whether models loaded on this thread keep their rows as the file has
    /// them (see [`with_plain_weights`]).
    static PLAIN_WEIGHTS: Cell<bool> = const { Cell::new(false) };
}

/// Installs the wraps (once per process; called when the llama.cpp backend
/// starts, before any model or context exists). The error says why they
/// could not be.
pub(crate) fn install() -> Result<(), String> {
    INSTALLED
        // SAFETY: called before any model or context is made (from
        // `backend()`'s initialisation), so nothing reads the entries while
        // they are written.
        .get_or_init(|| unsafe { wrap_cpu_device().and_then(|()| wrap_cpu_registry()) })
        .clone()
}

/// Runs `load` (which loads a llama.cpp model) with the model's weights
/// kept in plain host memory, as the file lays them out, when `plain`:
/// llama.cpp otherwise repacks the rows of some types (Q4_0, Q4_K, IQ4_NL,
/// MXFP4 on AVX2) into interleaved copies for its batched kernels, whose
/// sums for four tokens or more round differently from one token's. Kept
/// plain, Q4_0, Q4_K and IQ4_NL rows take svc's product, MXFP4 rows ggml's
/// dot product for every batch.
/// Fails when `plain` and the wrap is not installed.
pub(crate) fn with_plain_weights<T>(plain: bool, load: impl FnOnce() -> T) -> Result<T, String> {
    if plain {
        install().map_err(|e| format!("batch-invariant numerics are unavailable: {e}"))?;
    }
    PLAIN_WEIGHTS.with(|p| p.set(plain));
    let loaded = load();
    PLAIN_WEIGHTS.with(|p| p.set(false));
    Ok(loaded)
}

unsafe extern "C" fn get_proc_address(
    reg: sys::ggml_backend_reg_t,
    name: *const c_char,
) -> *mut c_void {
    let Some(original) = ORIGINAL_PROC_ADDRESS.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: ggml passes a NUL-terminated name.
    if PLAIN_WEIGHTS.with(Cell::get)
        && !name.is_null()
        && unsafe { CStr::from_ptr(name) } == EXTRA_BUFTS
    {
        return no_extra_bufts as *mut c_void;
    }
    // SAFETY: the registry's own entry, called as ggml would.
    unsafe { original(reg, name) }
}

/// `ggml_backend_dev_get_extra_bufts` for a model kept plain: an empty,
/// null-terminated list.
unsafe extern "C" fn no_extra_bufts(
    _dev: sys::ggml_backend_dev_t,
) -> *mut sys::ggml_backend_buffer_type_t {
    /// The list's terminator; llama.cpp only reads it.
    static NONE: [usize; 1] = [0];
    NONE.as_ptr().cast_mut().cast()
}

/// Runs `make` (which creates a llama.cpp context) with the context's CPU
/// backend using `kernels`. Fails when they are invariant ones and the wrap
/// is not installed.
pub(crate) fn with_kernels<T>(kernels: Kernels, make: impl FnOnce() -> T) -> Result<T, String> {
    if kernels != Kernels::Fastest {
        install().map_err(|e| format!("batch-invariant numerics are unavailable: {e}"))?;
    }
    KERNELS.with(|k| k.set(kernels));
    let made = make();
    KERNELS.with(|k| k.set(Kernels::Fastest));
    Ok(made)
}

unsafe extern "C" fn init_backend(
    dev: sys::ggml_backend_dev_t,
    params: *const c_char,
) -> sys::ggml_backend_t {
    let Some(original) = ORIGINAL.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the device's own entry, called as ggml would.
    let backend = unsafe { original(dev, params) };
    let kernels = KERNELS.with(Cell::get);
    if backend.is_null() || kernels == Kernels::Fastest {
        return backend;
    }
    // SAFETY: a CPU backend this entry just made, not yet computing.
    let adopted = unsafe { svc_attention_adopt(backend) };
    if kernels == Kernels::Reference || !adopted {
        // Without svc's kernel (a build without SIMD), ggml's reference
        // attention is invariant too, if slower.
        // SAFETY: as above.
        unsafe { sys::ggml_backend_cpu_set_use_ref(backend, true) };
    }
    backend
}

/// # Safety
/// No other thread may make a CPU backend meanwhile.
unsafe fn wrap_cpu_device() -> Result<(), String> {
    unsafe {
        let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if dev.is_null() {
            return Err("llama.cpp has no CPU device".into());
        }
        // `struct ggml_backend_device` starts with its table of entries.
        let table = dev.cast::<Option<unsafe extern "C" fn()>>();
        let entry = |i: usize| *table.add(i);
        let (Some(get_name), Some(get_type), Some(init)) =
            (entry(GET_NAME), entry(GET_TYPE), entry(INIT_BACKEND))
        else {
            return Err("the CPU device's table has empty entries".into());
        };
        let get_name = std::mem::transmute::<unsafe extern "C" fn(), GetName>(get_name);
        let get_type = std::mem::transmute::<unsafe extern "C" fn(), GetType>(get_type);
        let original = std::mem::transmute::<unsafe extern "C" fn(), InitBackend>(init);
        if text(get_name(dev)) != text(sys::ggml_backend_dev_name(dev))
            || get_type(dev) != sys::ggml_backend_dev_type(dev)
        {
            return Err("the CPU device's table is not laid out as this build expects".into());
        }
        let probe = original(dev, std::ptr::null());
        if probe.is_null() || !sys::ggml_backend_is_cpu(probe) {
            if !probe.is_null() {
                sys::ggml_backend_free(probe);
            }
            return Err("the CPU device's init_backend entry does not make a CPU backend".into());
        }
        sys::ggml_backend_free(probe);
        let _ = ORIGINAL.set(original);
        table
            .add(INIT_BACKEND)
            .cast::<*const c_void>()
            .write(init_backend as *const c_void);
        Ok(())
    }
}

/// # Safety
/// No other thread may load a model meanwhile.
unsafe fn wrap_cpu_registry() -> Result<(), String> {
    unsafe {
        let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if dev.is_null() {
            return Err("llama.cpp has no CPU device".into());
        }
        let reg = sys::ggml_backend_dev_backend_reg(dev);
        if reg.is_null() {
            return Err("llama.cpp's CPU device has no registry".into());
        }
        // `struct ggml_backend_reg` is an `int api_version`, then its table
        // of entries at a pointer's alignment.
        let table = reg
            .cast::<u8>()
            .add(std::mem::size_of::<*const c_void>())
            .cast::<Option<unsafe extern "C" fn()>>();
        let entry = |i: usize| *table.add(i);
        let (Some(get_name), Some(device_count), Some(proc_address)) = (
            entry(REG_GET_NAME),
            entry(REG_DEVICE_COUNT),
            entry(REG_GET_PROC_ADDRESS),
        ) else {
            return Err("the CPU registry's table has empty entries".into());
        };
        let get_name = std::mem::transmute::<unsafe extern "C" fn(), RegName>(get_name);
        let device_count =
            std::mem::transmute::<unsafe extern "C" fn(), RegDeviceCount>(device_count);
        let original = std::mem::transmute::<unsafe extern "C" fn(), GetProcAddress>(proc_address);
        if text(get_name(reg)) != text(sys::ggml_backend_reg_name(reg))
            || device_count(reg) != sys::ggml_backend_reg_dev_count(reg)
            || original(reg, EXTRA_BUFTS.as_ptr())
                != sys::ggml_backend_reg_get_proc_address(reg, EXTRA_BUFTS.as_ptr())
        {
            return Err("the CPU registry's table is not laid out as this build expects".into());
        }
        let _ = ORIGINAL_PROC_ADDRESS.set(original);
        table
            .add(REG_GET_PROC_ADDRESS)
            .cast::<*const c_void>()
            .write(get_proc_address as *const c_void);
        Ok(())
    }
}

/// What decides a reply's numbers besides the request, for
/// `system_fingerprint`.
pub(crate) struct Numerics<'a> {
    /// The file llama.cpp loaded (the Q8_0 copy when repacked).
    pub(crate) weights: &'a std::path::Path,
    pub(crate) kernels: Kernels,
    pub(crate) kv_type: &'a str,
    pub(crate) flash_attention: Option<bool>,
}

/// `fp_` and 12 hex digits of a SHA-256 over the weights' bytes, the engine
/// build (svc's engine version; ggml's version, commit and compiled CPU
/// features; the devices llama.cpp runs on, a GPU's model included) and
/// the numeric settings: it changes only when one of them does. Threads,
/// slots and context sizes are left out: with batch-invariant numerics
/// they change no bit.
pub(crate) fn fingerprint(numerics: &Numerics<'_>) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};

    let mut hash = Sha256::new();
    std::io::copy(&mut std::fs::File::open(numerics.weights)?, &mut hash)?;
    hash.update(build().as_bytes());
    hash.update(
        format!(
            "; kernels {}; kv {}; flash_attention {:?}",
            numerics.kernels.name(),
            numerics.kv_type,
            numerics.flash_attention
        )
        .as_bytes(),
    );
    Ok(format!("fp_{}", hex::encode(&hash.finalize()[..6])))
}

/// svc's attention kernel's numerics, by name: a new name whenever a change
/// to `kernel/attention.cpp` changes any bit it computes.
const ATTENTION_KERNEL: &str = "svc-1 (tiles of 64 visible cells)";

/// svc's matrix products' numerics, by name: a new name whenever a change
/// to `kernel/product.cpp` changes any bit it computes.
const PRODUCT_KERNEL: &str = "svc-2 (ggml's Q4_1, Q4_K and Q6_K dot products; ggml's dot product for the types summed otherwise)";

/// The engine build in words: svc's engine version, ggml's version and
/// commit, llama.cpp's compiled CPU features and the [`devices`]. Made once
/// per process: `llama_print_system_info` writes a static buffer, so two
/// engines loading at once must not both call it (that corrupted the heap
/// in the tests' parallel loads).
fn build() -> &'static str {
    static BUILD: OnceLock<String> = OnceLock::new();
    BUILD.get_or_init(|| {
        // SAFETY: ggml's and llama.cpp's own static strings, read by one
        // thread (`get_or_init` runs this once, others wait).
        unsafe {
            format!(
                "svc-engine-llama {}; attention kernel {ATTENTION_KERNEL}; product kernel {PRODUCT_KERNEL}; ggml {} {}; {}; devices: {}",
                env!("CARGO_PKG_VERSION"),
                text(sys::ggml_version()),
                text(sys::ggml_commit()),
                text(sys::llama_print_system_info()).trim(),
                devices()
            )
        }
    })
}

/// The devices llama.cpp can run on, as `CPU` or `CUDA0 (NVIDIA H100 80GB
/// HBM3)`: a GPU's model decides which kernels run; a CPU's does not (the
/// same instructions give the same bits on any x86-64-v3 CPU). The
/// registry is fixed once the backend has started, so this is read once.
pub(crate) fn devices() -> &'static str {
    static DEVICES: OnceLock<String> = OnceLock::new();
    // SAFETY: the registry's devices and their names live as long as the process.
    DEVICES.get_or_init(|| unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|i| {
                let dev = sys::ggml_backend_dev_get(i);
                let name = text(sys::ggml_backend_dev_name(dev));
                if sys::ggml_backend_dev_type(dev) == sys::GGML_BACKEND_DEVICE_TYPE_CPU {
                    name
                } else {
                    format!("{name} ({})", text(sys::ggml_backend_dev_description(dev)))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// A C string of llama.cpp's, or "" for none.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: as the caller promises.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::{Kernels, svc_attention_adopt, sys};
    use svc_gguf::GgufWriter;

    /// A file with a 1-D norm and one 64 x 4 matrix, as F32 or in Q4_1.
    fn weights(dir: &tempfile::TempDir, q4_1: bool) -> std::path::PathBuf {
        let mut file = GgufWriter::new();
        file.metadata("general.architecture", "llama")
            .tensor("norm.weight", &[64], vec![1.0; 64])
            .tensor("blk.0.ffn_up.weight", &[64, 4], vec![0.5; 256]);
        let file = if q4_1 {
            file.with_q4_1_matrices()
        } else {
            file
        };
        let path = dir.path().join(if q4_1 { "q4_1.gguf" } else { "f32.gguf" });
        file.write(&path).expect("writes the file");
        path
    }

    #[test]
    fn the_kernels_follow_the_matrices_types_and_the_settings() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (f32, q4_1) = (weights(&dir, false), weights(&dir, true));
        // Q4_1 matrices take one dot product for one token and for many;
        // F32 ones llamafile's tiles for several tokens, but svc's product
        // takes them instead (ggml's dot product for every token).
        assert_eq!(Kernels::for_model(&q4_1, true, None), Kernels::Attention);
        assert_eq!(Kernels::for_model(&f32, true, None), Kernels::Attention);
        // Without flash attention the attention is matrix products too.
        assert_eq!(
            Kernels::for_model(&q4_1, true, Some(false)),
            Kernels::Reference
        );
        assert_eq!(Kernels::for_model(&q4_1, false, None), Kernels::Fastest);
        // A file that cannot be read gets the safe choice.
        let missing = dir.path().join("missing.gguf");
        assert_eq!(Kernels::for_model(&missing, true, None), Kernels::Reference);

        // A Q4_K_M file's matrices (Q4_K, Q6_K, Q8_0) take svc's product
        // or sum alike, and so do the K-quants ggml's tiled kernel takes
        // from eight tokens (Q5_K).
        let k_quants = |name: &str, types: &[(u32, usize)], experts: u64| {
            let mut file = GgufWriter::new();
            file.metadata("general.architecture", "llama").tensor(
                "norm.weight",
                &[256],
                vec![1.0; 256],
            );
            // (type, bytes of a block of 256 values): four rows of one
            // block for each expert.
            for (i, &(ty, block)) in types.iter().enumerate() {
                file.raw_tensor(
                    &format!("blk.{i}.ffn_up_exps.weight"),
                    &[256, 4, experts],
                    ty,
                    vec![0; block * 4 * experts as usize],
                );
            }
            let path = dir.path().join(name);
            file.write(&path).expect("writes the file");
            path
        };
        let q4_k_m = k_quants(
            "q4_k_m.gguf",
            &[
                (sys::GGML_TYPE_Q4_K, 144),
                (sys::GGML_TYPE_Q6_K, 210),
                (sys::GGML_TYPE_Q8_0, 8 * 34),
            ],
            1,
        );
        assert_eq!(Kernels::for_model(&q4_k_m, true, None), Kernels::Attention);
        let q5_k = k_quants("q5_k.gguf", &[(sys::GGML_TYPE_Q5_K, 176)], 1);
        assert_eq!(Kernels::for_model(&q5_k, true, None), Kernels::Attention);
        // A mixture's K-quant experts: svc's product takes MUL_MAT_ID too.
        let moe = k_quants("moe.gguf", &[(sys::GGML_TYPE_Q4_K, 144)], 8);
        assert_eq!(Kernels::for_model(&moe, true, None), Kernels::Attention);
        let moe = k_quants("moe_q8_0.gguf", &[(sys::GGML_TYPE_Q8_0, 8 * 34)], 8);
        assert_eq!(Kernels::for_model(&moe, true, None), Kernels::Attention);
    }

    /// `w` (`k` x `rows` from `weights`, quantized to `ty`) times `tokens`
    /// (F32, `k` x n) on a CPU backend of two threads, adopted by svc's
    /// kernels or taking ggml's reference kernels: the product's bits.
    fn product(
        ty: sys::ggml_type,
        weights: &[f32],
        k: i64,
        rows: i64,
        tokens: &[f32],
        adopted: bool,
    ) -> Vec<f32> {
        let n = tokens.len() as i64 / k;
        // SAFETY: tensors of `compute`'s context, filled within their sizes.
        compute(adopted, |ctx| unsafe {
            let w = sys::ggml_new_tensor_2d(ctx, ty, k, rows);
            sys::ggml_quantize_chunk(
                ty,
                weights.as_ptr(),
                (*w).data,
                0,
                rows,
                k,
                std::ptr::null(),
            );
            let b = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, k, n);
            std::ptr::copy_nonoverlapping(tokens.as_ptr(), (*b).data.cast::<f32>(), tokens.len());
            sys::ggml_mul_mat(ctx, w, b)
        })
    }

    /// A mixture of `experts` matrices (`k` x `rows` each, from `weights`,
    /// quantized to `ty`) by `tokens` (F32, `k` x `per_token` x n: one row
    /// for every expert a token uses, or one for all), each token by the
    /// experts `ids` names (`used` a token), as ggml_mul_mat_id computes
    /// it: the products' bits (`rows` x `used` x n).
    fn product_id(
        ty: sys::ggml_type,
        weights: &[f32],
        (k, rows, experts): (i64, i64, i64),
        (tokens, per_token): (&[f32], i64),
        (ids, used): (&[i32], i64),
        adopted: bool,
    ) -> Vec<f32> {
        let n = ids.len() as i64 / used;
        // SAFETY: tensors of `compute`'s context, filled within their sizes.
        compute(adopted, |ctx| unsafe {
            let w = sys::ggml_new_tensor_3d(ctx, ty, k, rows, experts);
            sys::ggml_quantize_chunk(
                ty,
                weights.as_ptr(),
                (*w).data,
                0,
                rows * experts,
                k,
                std::ptr::null(),
            );
            let b = sys::ggml_new_tensor_3d(ctx, sys::GGML_TYPE_F32, k, per_token, n);
            std::ptr::copy_nonoverlapping(tokens.as_ptr(), (*b).data.cast::<f32>(), tokens.len());
            let i = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_I32, used, n);
            std::ptr::copy_nonoverlapping(ids.as_ptr(), (*i).data.cast::<i32>(), ids.len());
            sys::ggml_mul_mat_id(ctx, w, b, i)
        })
    }

    /// The F32 tensor `build` makes in a ggml context of this test's own,
    /// computed on a CPU backend of two threads, adopted by svc's kernels
    /// or taking ggml's reference kernels.
    fn compute(
        adopted: bool,
        build: impl FnOnce(*mut sys::ggml_context) -> *mut sys::ggml_tensor,
    ) -> Vec<f32> {
        // SAFETY: a ggml context of this test's own, computed on a CPU
        // backend of its own; the result read within its size.
        unsafe {
            let ctx = sys::ggml_init(sys::ggml_init_params {
                mem_size: 64 << 20,
                mem_buffer: std::ptr::null_mut(),
                no_alloc: false,
            });
            assert!(!ctx.is_null(), "a ggml context");
            let out = build(ctx);
            let graph = sys::ggml_new_graph(ctx);
            sys::ggml_build_forward_expand(graph, out);
            let backend = sys::ggml_backend_cpu_init();
            sys::ggml_backend_cpu_set_n_threads(backend, 2);
            if adopted {
                assert!(svc_attention_adopt(backend), "the backend is adopted");
            } else {
                // ggml's dot product for every batch (its tiled K-quant
                // kernel takes eight tokens or more otherwise).
                sys::ggml_backend_cpu_set_use_ref(backend, true);
            }
            let status = sys::ggml_backend_graph_compute(backend, graph);
            assert_eq!(status, sys::GGML_STATUS_SUCCESS);
            let result = std::slice::from_raw_parts(
                (*out).data.cast::<f32>(),
                sys::ggml_nelements(out) as usize,
            )
            .to_vec();
            sys::ggml_backend_free(backend);
            sys::ggml_free(ctx);
            result
        }
    }

    /// Values in [-1, 1) from a fixed sequence.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn the_q4_1_kernel_gives_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_Q4_1, 256);
    }

    #[test]
    fn the_q4_k_kernel_gives_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_Q4_K, 512);
    }

    #[test]
    fn the_q5_k_kernel_gives_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_Q5_K, 512);
    }

    #[test]
    fn the_q6_k_kernel_gives_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_Q6_K, 512);
    }

    /// Q4_0 and Q5_0, which ggml multiplies for several tokens with
    /// llamafile's tiles (and repacks Q4_0 for them otherwise).
    #[test]
    fn the_q4_0_and_q5_0_kernels_give_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_Q4_0, 256);
        same_bits_as_ggml(sys::GGML_TYPE_Q5_0, 256);
    }

    /// Q2_K and Q3_K, the bulk of Q2_K and Q3_K_M files, which ggml's tiled
    /// K-quant kernel takes from eight tokens.
    #[test]
    fn the_q2_k_and_q3_k_kernels_give_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_Q2_K, 512);
        same_bits_as_ggml(sys::GGML_TYPE_Q3_K, 512);
    }

    /// IQ4_NL (an IQ4_NL file's rows, and what llama.cpp's quantizer puts
    /// in place of the i-quants in rows that are not whole super-blocks, as
    /// a small model's are), which ggml multiplies with llamafile's tiles
    /// from two tokens; its dot product sums even and odd blocks apart.
    #[test]
    fn the_iq4_nl_kernel_gives_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_IQ4_NL, 256);
    }

    /// IQ4_XS, whose rows ggml's tiled K-quant kernel takes from eight
    /// tokens.
    #[test]
    fn the_iq4_xs_kernel_gives_ggmls_bits_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_IQ4_XS, 512);
    }

    /// Types ggml multiplies for several tokens with llamafile's tiles (F16,
    /// IQ4_NL rows of an odd number of blocks) or its tiled K-quant kernel
    /// (IQ3_S): svc's product gives its dot product's bits instead.
    #[test]
    fn types_summed_otherwise_get_ggmls_dot_product_for_any_number_of_tokens() {
        same_bits_as_ggml(sys::GGML_TYPE_F16, 256);
        same_bits_as_ggml(sys::GGML_TYPE_IQ4_NL, 224);
        same_bits_as_ggml(sys::GGML_TYPE_IQ3_S, 256);
    }

    /// A `k` x 69 matrix of `ty` (an odd number of rows: a tile's
    /// remainder) times 1 to 150 tokens: svc's kernel gives ggml's bits
    /// (its dot product's, on weights not repacked), and each token's
    /// column the same bits as that token alone.
    fn same_bits_as_ggml(ty: sys::ggml_type, k: i64) {
        let rows = 69_i64;
        let weights = values((k * rows) as usize, 7);
        let all = values((k * 150) as usize, 11);
        let alone: Vec<Vec<f32>> = (0..150)
            .map(|j| {
                let token = &all[(j * k) as usize..((j + 1) * k) as usize];
                product(ty, &weights, k, rows, token, false)
            })
            .collect();
        for n in [1_i64, 2, 3, 4, 5, 6, 7, 8, 16, 17, 64, 150] {
            let tokens = &all[..(n * k) as usize];
            let before = super::product_kernel_nodes();
            let ours = product(ty, &weights, k, rows, tokens, true);
            assert!(
                super::product_kernel_nodes() > before,
                "svc's kernel computed the product of {n} tokens"
            );
            let ggml = product(ty, &weights, k, rows, tokens, false);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&ours),
                bits(&ggml),
                "{n} tokens: svc's kernel against ggml's"
            );
            for (j, one) in alone.iter().take(n as usize).enumerate() {
                let column = &ours[j * rows as usize..(j + 1) * rows as usize];
                assert_eq!(
                    bits(column),
                    bits(one),
                    "token {j} of {n} against itself alone"
                );
            }
        }
    }

    /// A mixture of experts' product (MUL_MAT_ID), whose K-quant experts
    /// ggml's tiled kernel takes from eight tokens an expert: svc's product
    /// gives the bits of ggml's dot product for 1 to 40 tokens, each
    /// token's rows the same as that token's alone, with one activation row
    /// for all of a token's experts (as a feed-forward's gate and up) or
    /// one for each (as its down).
    #[test]
    fn a_mixture_of_experts_gets_ggmls_dot_product_for_any_number_of_tokens() {
        let (rows, experts, used) = (37_i64, 6_i64, 2_i64);
        for (ty, k) in [
            (sys::GGML_TYPE_Q4_K, 512_i64),
            (sys::GGML_TYPE_Q5_0, 256),
            (sys::GGML_TYPE_Q3_K, 512),
        ] {
            let weights = values((k * rows * experts) as usize, 5);
            // Each token's two experts, distinct, from a fixed sequence:
            // some experts get many tokens (eight or more: the tiled
            // kernel's), some few.
            let all_ids: Vec<i32> = (0..40_i32)
                .flat_map(|t| {
                    let first = (t * 7 + t / 3) % experts as i32;
                    let second = (first + 1 + t % 2 * 3) % experts as i32;
                    [first, second]
                })
                .collect();
            for per_token in [1, used] {
                let row = (k * per_token) as usize;
                let all = values(row * 40, 13);
                let one = |j: usize, n: usize, adopted: bool| {
                    product_id(
                        ty,
                        &weights,
                        (k, rows, experts),
                        (&all[j * row..(j + n) * row], per_token),
                        (&all_ids[j * used as usize..(j + n) * used as usize], used),
                        adopted,
                    )
                };
                let out = (rows * used) as usize;
                for n in [1_usize, 3, 8, 17, 40] {
                    let before = super::mixture_kernel_nodes();
                    let ours = one(0, n, true);
                    assert!(
                        super::mixture_kernel_nodes() > before,
                        "svc's kernel computed the mixture's product of {n} tokens"
                    );
                    let ggml = one(0, n, false);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&ours),
                        bits(&ggml),
                        "type {ty}, {per_token} rows a token, {n} tokens: svc's kernel against ggml's"
                    );
                    for j in [0, n / 2, n - 1] {
                        assert_eq!(
                            bits(&ours[j * out..(j + 1) * out]),
                            bits(&one(j, 1, false)),
                            "type {ty}: token {j} of {n} against itself alone"
                        );
                    }
                }
            }
        }
    }
}
