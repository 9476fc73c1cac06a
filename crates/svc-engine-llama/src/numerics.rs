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
//! can change after a long prompt (issue 32). ggml's CPU backend has a
//! switch, `ggml_backend_cpu_set_use_ref`, that always takes the vector
//! kernel (and skips operator fusion). The engine keeps each sequence's
//! cells in position order (see the scheduler), so with that switch a
//! query's attention is the same sum in the same order every time.
//!
//! The matrix products of the default model are already invariant on x86:
//! a Q8_0 row (the copy `svc serve` loads) times a token goes through
//! llamafile's tiles for two tokens or more and through ggml's dot product
//! for one, and both compute one block after another with the same fused
//! multiply-adds and the same horizontal sum; Q4_1 rows always take the dot
//! product. Weights that ggml repacks for this CPU (Q4_0, Q4_K, IQ4_NL) or
//! keeps in F16 or F32 are not: their batched kernels sum in another order,
//! and for such models only the attention is made invariant.
//!
//! llama.cpp makes the context's CPU backend itself and offers no way to
//! reach it, so the CPU device's `init_backend` entry is wrapped once, when
//! the backend starts: each CPU backend made while the calling thread has
//! asked for reference kernels ([`with_reference_kernels`]) gets the switch.
//! The wrap checks the device table's layout first (its name and type
//! entries give what ggml's own accessors give, and the entry it replaces
//! makes a CPU backend) and is not installed when any of that fails.

#![expect(
    unsafe_code,
    reason = "wrapping an entry of ggml's CPU device table: llama.cpp offers no way to reach the context's CPU backend"
)]

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};
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

/// Whether the wrap is installed, or why not.
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
/// The CPU device's own `init_backend`, set before the wrap replaces it.
static ORIGINAL: OnceLock<InitBackend> = OnceLock::new();

thread_local! {
    /// Whether CPU backends made on this thread get reference kernels.
    static REFERENCE: Cell<bool> = const { Cell::new(false) };
}

/// Installs the wrap (once per process; called when the llama.cpp backend
/// starts, before any context exists). The error says why it could not be.
pub(crate) fn install() -> Result<(), String> {
    INSTALLED
        // SAFETY: called before any context is made (from `backend()`'s
        // initialisation), so nothing reads the entry while it is written.
        .get_or_init(|| unsafe { wrap_cpu_device() })
        .clone()
}

/// Runs `make` (which creates a llama.cpp context) with the context's CPU
/// backend using reference kernels when `on`. Fails when `on` and the wrap
/// is not installed.
pub(crate) fn with_reference_kernels<T>(on: bool, make: impl FnOnce() -> T) -> Result<T, String> {
    if on {
        install().map_err(|e| format!("batch-invariant numerics are unavailable: {e}"))?;
    }
    REFERENCE.with(|r| r.set(on));
    let made = make();
    REFERENCE.with(|r| r.set(false));
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
    if !backend.is_null() && REFERENCE.with(Cell::get) {
        // SAFETY: a CPU backend this entry just made.
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

/// What decides a reply's numbers besides the request, for
/// `system_fingerprint`.
pub(crate) struct Numerics<'a> {
    /// The file llama.cpp loaded (the Q8_0 copy when repacked).
    pub(crate) weights: &'a std::path::Path,
    pub(crate) batch_invariant: bool,
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
            "; batch_invariant {}; kv {}; flash_attention {:?}",
            numerics.batch_invariant, numerics.kv_type, numerics.flash_attention
        )
        .as_bytes(),
    );
    Ok(format!("fp_{}", hex::encode(&hash.finalize()[..6])))
}

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
                "svc-engine-llama {}; ggml {} {}; {}; devices: {}",
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
