//! Tile jobs: the loops that run a kernel over cache-resident tiles, compiled
//! once per instruction set ([`crate::engine::isa`]).

use crate::engine::half_io::TileIo;
use crate::engine::hints::{prefetch_op_loop, stream_copy};
use crate::engine::isa::TileJob;
use crate::engine::vector::{Stores, VectorLoop, VectorLoops};
use crate::kernel::{MapFn, MapGrad};
use crate::{DType, Float};

/// `out[j] = kernel(ins[0][j], .., ins[N-1][j])` over compute-type slices of
/// equal length.
pub struct MapTile<'a, K, C, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, each at least `out.len()` long.
    pub ins: [&'a [C]; N],
    /// The result.
    pub out: &'a mut [C],
}

/// Elements per block of a [`MapTile`] loop. Blocks are fixed-size arrays,
/// so the vector loop over one has no bounds checks and no scalar
/// remainder: over plain slices LLVM leaves the last 1-16 elements of every
/// call to a scalar loop, which on a 1024-element tile of `tanh` costs as
/// much as the vector part.
const BLOCK: usize = 256;
/// Loops over fewer bytes of output than this (cache-resident tiles) run
/// without prefetching.
const PREFETCH_MIN: usize = 64 * 1024;

impl<K: MapFn<N>, C: Float, const N: usize> MapTile<'_, K, C, N> {
    /// The plain loop, for the remainder after the blocks.
    #[inline(always)]
    fn apply_slices(kernel: &K, ins: [&[C]; N], out: &mut [C]) {
        let ins: [&[C]; N] = ins.map(|s| &s[..out.len()]);
        for (j, o) in out.iter_mut().enumerate() {
            let mut x: [C; N] = std::array::from_fn(|i| ins[i][j]);
            *o = kernel.apply(&mut x);
        }
    }
}

impl<K: MapFn<N>, C: Float, const N: usize> TileJob for MapTile<'_, K, C, N> {
    /// Whole blocks, then the remainder. Long loops also ask for the next
    /// block's inputs while computing this one: the hardware prefetcher
    /// alone leaves memory and compute serialised on loops past the caches.
    #[inline(always)]
    fn run(self) {
        let n = self.out.len();
        // A local copy: the compiler cannot see that stores to `out` leave
        // `*self.kernel` alone, and would reload (and convert) a scalar
        // parameter for every vector.
        let kernel = *self.kernel;
        let ins: [&[C]; N] = self.ins.map(|s| &s[..n]);
        let ahead = std::mem::size_of_val(self.out) >= PREFETCH_MIN;
        let mut blocks = self.out.chunks_exact_mut(BLOCK);
        for (b, out) in (&mut blocks).enumerate() {
            let start = b * BLOCK;
            if ahead {
                prefetch_next_block(&ins, start);
            }
            let out: &mut [C; BLOCK] = out.try_into().expect("exact chunk");
            let xs: [&[C; BLOCK]; N] = ins.map(|s| {
                s[start..start + BLOCK]
                    .try_into()
                    .expect("inside the input")
            });
            apply_block(&kernel, xs, out);
        }
        let rest = blocks.into_remainder();
        let done = n - rest.len();
        Self::apply_slices(&kernel, ins.map(|s| &s[done..]), rest);
    }

    #[inline(always)]
    fn run_fma(self) {
        MapTile {
            kernel: self.kernel,
            ins: self.ins.map(bytemuck::cast_slice::<C, C::Fma>),
            out: bytemuck::cast_slice_mut::<C, C::Fma>(self.out),
        }
        .run()
    }

    /// f32 tiles of a kernel with an AVX-512 vector form run that form
    /// ([`MapTile::run_form`]).
    #[inline(always)]
    unsafe fn run_avx512(self) {
        // SAFETY: the caller's contract.
        unsafe { self.run_form(Mode::Avx512) }
    }

    /// As [`TileJob::run_avx512`], with the form's AVX2 loops.
    #[inline(always)]
    unsafe fn run_avx2(self) {
        // SAFETY: the caller's contract.
        unsafe { self.run_form(Mode::Avx2) }
    }
}

impl<K: MapFn<N>, C: Float, const N: usize> MapTile<'_, K, C, N> {
    /// The kernel's vector form for `mode`, a block at a time with the
    /// next block's input asked for on long loops, as in
    /// [`TileJob::run`]; without one, [`TileJob::run_fma`].
    ///
    /// # Safety
    /// As for [`Mode::run`].
    #[inline(always)]
    unsafe fn run_form(self, mode: Mode) {
        let Some(simd_loop) = f32_form::<K, C, N>(self.kernel, mode) else {
            return self.run_fma();
        };
        let out: &mut [f32] = bytemuck::cast_slice_mut(self.out);
        let x: &[f32] = &bytemuck::cast_slice(self.ins[0])[..out.len()];
        if std::mem::size_of_val(out) < PREFETCH_MIN {
            // SAFETY: the caller guarantees the CPU `mode` needs (a form
            // has loops only for AVX-512 and AVX2); the slices are one
            // length.
            unsafe { simd_loop(x, out, Stores::Cached) };
            return;
        }
        let n = x.len();
        for (b, (xb, ob)) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)).enumerate() {
            let next = ((b + 1) * BLOCK).min(n)..((b + 2) * BLOCK).min(n);
            prefetch_op_loop(&x[next]);
            // SAFETY: as above.
            unsafe { simd_loop(xb, ob, Stores::Cached) };
        }
    }
}

/// `out[j] = kernel(xs[0][j], ..)` over one fixed-size block: no bounds
/// checks and no scalar remainder (see [`BLOCK`]).
#[inline(always)]
fn apply_block<K: MapFn<N>, C: Float, const N: usize, const L: usize>(
    kernel: &K,
    xs: [&[C; L]; N],
    out: &mut [C; L],
) {
    for (j, o) in out.iter_mut().enumerate() {
        let mut x: [C; N] = std::array::from_fn(|i| xs[i][j]);
        *o = kernel.apply(&mut x);
    }
}

/// Asks for the block after the one at `start` of each input (up to its
/// end), while this one computes.
#[inline(always)]
fn prefetch_next_block<T, const N: usize>(ins: &[&[T]; N], start: usize) {
    for x in ins {
        let n = x.len();
        prefetch_op_loop(&x[(start + BLOCK).min(n)..(start + 2 * BLOCK).min(n)]);
    }
}

/// As [`MapTile`], for kernels that also update their inputs in place: the
/// inputs' new values are written back into `ins`.
pub struct MapTileMut<'a, K, C, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, updated in place.
    pub ins: [&'a mut [C]; N],
    /// The result.
    pub out: &'a mut [C],
}

impl<K: MapFn<N>, C: Float, const N: usize> TileJob for MapTileMut<'_, K, C, N> {
    #[inline(always)]
    fn run(self) {
        let (ins, kernel) = (self.ins, *self.kernel);
        for (j, o) in self.out.iter_mut().enumerate() {
            let mut x: [C; N] = std::array::from_fn(|i| ins[i][j]);
            *o = kernel.apply(&mut x);
            for i in 0..N {
                ins[i][j] = x[i];
            }
        }
    }

    #[inline(always)]
    fn run_fma(self) {
        MapTileMut {
            kernel: self.kernel,
            ins: self.ins.map(bytemuck::cast_slice_mut::<C, C::Fma>),
            out: bytemuck::cast_slice_mut::<C, C::Fma>(self.out),
        }
        .run()
    }
}

/// As [`MapTile`] for outputs written with streaming stores: a tile at a
/// time into the L1 buffer `res`, then [`stream_copy`] to `out` (or, where
/// an f32 vector form runs, its loop streaming straight from registers),
/// asking for the next tile's inputs meanwhile. The caller must call
/// [`stream_fence`] after, on the same thread (crate-private for that).
pub(crate) struct StreamMap<'a, K, C, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, each `out.len()` long.
    pub ins: [&'a [C]; N],
    /// The result.
    pub out: &'a mut [C],
    /// The tile buffer; its length is the tile size.
    pub res: &'a mut [C],
}

/// The loops of the kernel's vector form for `mode`'s instruction set
/// (AVX-512 or AVX2; unary kernels only).
#[inline(always)]
fn form_loops<K: MapFn<N>, const N: usize>(kernel: &K, mode: Mode) -> Option<VectorLoops> {
    match (mode, kernel.vector()) {
        (Mode::Avx512, Some(v)) if N == 1 => v.avx512().copied(),
        (Mode::Avx2, Some(v)) if N == 1 => v.avx2().copied(),
        _ => None,
    }
}

/// The loop of the kernel's vector form for `mode` over f32 compute
/// slices (f16/bf16 storage goes through [`TileIo::half_loop`] instead,
/// f64 has none): the one place the f32 tile loops decide whether a form
/// runs.
#[inline(always)]
fn f32_form<K: MapFn<N>, C: Float, const N: usize>(
    kernel: &K,
    mode: Mode,
) -> Option<VectorLoop<f32>> {
    match C::DTYPE {
        DType::F32 => form_loops(kernel, mode).map(|l| l.f32),
        _ => None,
    }
}

/// Which of its loops a job that builds [`MapTile`]s runs them with.
#[derive(Clone, Copy)]
enum Mode {
    Plain,
    Fma,
    /// Only passed by [`TileJob::run_avx512`], whose caller vouches for
    /// the CPU.
    Avx512,
    /// Only passed by [`TileJob::run_avx2`], whose caller vouches for the
    /// CPU.
    Avx2,
}

impl Mode {
    /// Runs `job` with the loop this mode stands for.
    ///
    /// # Safety
    /// `Mode::Avx512` only on a CPU with what [`Isa::Avx512`] stands for,
    /// `Mode::Avx2` only on one with what [`Isa::Avx2`] stands for.
    #[inline(always)]
    unsafe fn run<J: TileJob>(self, job: J) {
        match self {
            Mode::Plain => job.run(),
            Mode::Fma => job.run_fma(),
            // SAFETY: the caller's contract.
            Mode::Avx512 => unsafe { job.run_avx512() },
            // SAFETY: the caller's contract.
            Mode::Avx2 => unsafe { job.run_avx2() },
        }
    }
}

/// [`TileJob`] for a job whose loops are one `go(mode)`: each entry
/// point passes its [`Mode`].
macro_rules! mode_tile_job {
    ($job:ty, $t:ident: $bound:path) => {
        impl<K: MapFn<N>, $t: $bound, const N: usize> TileJob for $job {
            #[inline(always)]
            fn run(self) {
                // SAFETY: not a mode with CPU requirements.
                unsafe { self.go(Mode::Plain) }
            }

            #[inline(always)]
            fn run_fma(self) {
                // SAFETY: not a mode with CPU requirements.
                unsafe { self.go(Mode::Fma) }
            }

            #[inline(always)]
            unsafe fn run_avx512(self) {
                // SAFETY: the caller guarantees the CPU.
                unsafe { self.go(Mode::Avx512) }
            }

            #[inline(always)]
            unsafe fn run_avx2(self) {
                // SAFETY: the caller guarantees the CPU.
                unsafe { self.go(Mode::Avx2) }
            }
        }
    };
}

/// The most output bytes a staged tile computes before streaming them out
/// (where neither [`stream_chunks_avx512`] nor [`convert_chunks`] runs:
/// f32/f64 and bf16 on AVX2, and plain code). Smaller tiles interleave the loads with
/// the streamed stores more finely, so 1 KB beats the full tile size
/// (see bench/RESULTS.md).
pub(crate) const STAGED_TILE_BYTES: usize = 1024;

/// Elements of `T` in a staged tile of at most `cap` elements.
#[inline]
fn staged_tile<T>(cap: usize) -> usize {
    (STAGED_TILE_BYTES / std::mem::size_of::<T>().max(1))
        .min(cap)
        .max(1)
}

/// Elements per chunk that [`stream_chunks_avx512`] computes before
/// streaming it out: four cache lines of f32.
const STREAM_CHUNK: usize = 64;

/// A chunk's results, line-aligned so that no load of a line splits.
#[repr(C, align(64))]
struct ChunkLines<T>([T; STREAM_CHUNK]);

/// `out[j] = kernel(ins[0][j], ..)` with streaming stores straight after
/// the kernel, for kernels without a vector form: the lanes up to `out`'s
/// first 64-byte boundary and the tail are stored plainly; in between,
/// each chunk of [`STREAM_CHUNK`] results is computed into a line-aligned
/// buffer that stays in registers or L1, then streamed out a line at a
/// time. Against computing a 1024-element tile and streaming it out
/// afterwards, this interleaves the inputs' loads with the stores finely,
/// as a vector form's loop does: about as fast as a hand-written loop
/// streaming from registers, where a staged tile of any size, or plain
/// stores, are clearly slower. The caller fences.
///
/// # Safety
/// The CPU has what [`Isa::Avx512`] stands for, and the caller is
/// compiled for it (this inlines into `run_avx512`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_chunks_avx512<K: MapFn<N>, D: Float, const N: usize>(
    kernel: &K,
    ins: [&[D]; N],
    out: &mut [D],
) {
    let n = out.len();
    // A local copy, as in `MapTile::run`.
    let kernel = *kernel;
    let ins: [&[D]; N] = ins.map(|s| &s[..n]);
    let head = out.as_ptr().align_offset(64).min(n);
    MapTile::<K, D, N>::apply_slices(&kernel, ins.map(|s| &s[..head]), &mut out[..head]);
    let mut chunk = ChunkLines([D::zero(); STREAM_CHUNK]);
    let mut start = head;
    while start + STREAM_CHUNK <= n {
        if (start - head).is_multiple_of(BLOCK) {
            prefetch_next_block(&ins, start);
        }
        let xs: [&[D; STREAM_CHUNK]; N] = ins.map(|s| {
            s[start..start + STREAM_CHUNK]
                .try_into()
                .expect("inside the input")
        });
        apply_block(&kernel, xs, &mut chunk.0);
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut out[start..start + STREAM_CHUNK]);
        // SAFETY: `dst` starts on a line: `start - head` is a multiple of
        // `STREAM_CHUNK`, whose bytes are a multiple of 64 for 4- and
        // 8-byte types; both slices are that many bytes. The features are
        // the caller's contract.
        unsafe { crate::engine::hints::x86::stream_avx512(dst, bytemuck::cast_slice(&chunk.0)) };
        start += STREAM_CHUNK;
    }
    MapTile::<K, D, N>::apply_slices(&kernel, ins.map(|s| &s[start..]), &mut out[start..]);
}

/// How [`convert_chunks`] converts 32 lanes and streams a chunk on one
/// instruction set: the only part of that loop that differs between
/// AVX-512 and AVX2.
#[cfg(target_arch = "x86_64")]
trait ChunkIsa {
    /// [`TileIo::widen32_avx512`] or its AVX2 twin.
    ///
    /// # Safety
    /// The CPU has the set, and the caller is compiled for it.
    unsafe fn widen32<S: TileIo>(src: &[S; 32], dst: &mut [S::Compute; 32]);
    /// The inverse of [`ChunkIsa::widen32`].
    ///
    /// # Safety
    /// As for [`ChunkIsa::widen32`].
    unsafe fn narrow32<S: TileIo>(src: &[S::Compute; 32], dst: &mut [S; 32]);
    /// Streams whole lines to `dst`, which starts on one.
    ///
    /// # Safety
    /// As for [`ChunkIsa::widen32`]; `dst` and `src` are the same length,
    /// a multiple of 64 bytes. The caller fences.
    unsafe fn stream(dst: &mut [u8], src: &[u8]);
}

/// [`ChunkIsa`] for [`Isa::Avx512`], narrowing bf16 with AVX-512 BF16's
/// conversion when `BF16` ([`TileIo::narrow32_avx512bf16`]).
#[cfg(target_arch = "x86_64")]
struct Avx512Chunks<const BF16: bool>;

#[cfg(target_arch = "x86_64")]
impl<const BF16: bool> ChunkIsa for Avx512Chunks<BF16> {
    #[inline(always)]
    unsafe fn widen32<S: TileIo>(src: &[S; 32], dst: &mut [S::Compute; 32]) {
        // SAFETY: the caller's contract.
        unsafe { S::widen32_avx512(src, dst) }
    }
    #[inline(always)]
    unsafe fn narrow32<S: TileIo>(src: &[S::Compute; 32], dst: &mut [S; 32]) {
        // SAFETY: the caller's contract (AVX-512 BF16 included with
        // `BF16`).
        unsafe {
            if BF16 {
                S::narrow32_avx512bf16(src, dst)
            } else {
                S::narrow32_avx512(src, dst)
            }
        }
    }
    #[inline(always)]
    unsafe fn stream(dst: &mut [u8], src: &[u8]) {
        // SAFETY: the caller's contract.
        unsafe { crate::engine::hints::x86::stream_avx512(dst, src) }
    }
}

/// [`ChunkIsa`] for [`Isa::Avx2`]: F16C for f16, integer shifts and
/// rounding for bf16, 32-byte streaming stores.
#[cfg(target_arch = "x86_64")]
struct Avx2Chunks;

#[cfg(target_arch = "x86_64")]
impl ChunkIsa for Avx2Chunks {
    #[inline(always)]
    unsafe fn widen32<S: TileIo>(src: &[S; 32], dst: &mut [S::Compute; 32]) {
        // SAFETY: the caller's contract.
        unsafe { S::widen32_avx2(src, dst) }
    }
    #[inline(always)]
    unsafe fn narrow32<S: TileIo>(src: &[S::Compute; 32], dst: &mut [S; 32]) {
        // SAFETY: the caller's contract.
        unsafe { S::narrow32_avx2(src, dst) }
    }
    #[inline(always)]
    unsafe fn stream(dst: &mut [u8], src: &[u8]) {
        // SAFETY: the caller's contract; a line start is 32-byte aligned.
        unsafe { crate::engine::hints::x86::stream_avx2(dst, src) }
    }
}

/// `out[j] = kernel(ins[0][j], ..)` over half-type storage for kernels
/// without a vector form, converting in registers with `I`'s
/// instructions: each chunk of [`STREAM_CHUNK`] elements is widened into
/// a line-aligned f32 buffer per input ([`ChunkIsa::widen32`]), computed
/// as the f32 tile loops compute it, narrowed, and written out, plainly
/// or (with `streamed`) as whole streamed lines, the lanes before `out`'s
/// first line and the tail element by element. Against converting a tile
/// into L1 buffers, computing it into a third and converting that out (or
/// into a fourth to stream), this keeps every value in registers or one
/// line of L1 and interleaves loads and stores as [`stream_chunks_avx512`]
/// does. With `streamed` the caller fences.
///
/// # Safety
/// The CPU has what `I` needs (see [`convert_chunks_on`]), and the caller
/// is compiled for it (this inlines into `run_avx512`, `run_avx2` or
/// [`convert_chunks_avx512bf16`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn convert_chunks<K: MapFn<N>, S: TileIo, const N: usize, I: ChunkIsa>(
    kernel: &K,
    ins: [&[S]; N],
    out: &mut [S],
    streamed: bool,
) {
    /// The f32 tile loops' element type for `S`'s compute type.
    type Lane<S> = <<S as Float>::Compute as Float>::Fma;
    /// One element as the f32 tile loops compute it (the plain head and
    /// tail).
    #[inline(always)]
    fn one<K: MapFn<N>, S: TileIo, const N: usize>(kernel: &K, xs: [S; N]) -> S {
        let mut x: [Lane<S>; N] = xs.map(|v| bytemuck::cast(v.to_compute()));
        S::from_compute(bytemuck::cast(kernel.apply(&mut x)))
    }
    let n = out.len();
    // A local copy, as in `MapTile::run`.
    let kernel = *kernel;
    let ins: [&[S]; N] = ins.map(|s| &s[..n]);
    let head = if streamed {
        out.as_ptr().align_offset(64).min(n)
    } else {
        0
    };
    for (j, o) in out[..head].iter_mut().enumerate() {
        *o = one(&kernel, std::array::from_fn(|i| ins[i][j]));
    }
    let mut wide: [ChunkLines<S::Compute>; N] =
        std::array::from_fn(|_| ChunkLines([S::Compute::zero(); STREAM_CHUNK]));
    let mut res = ChunkLines([S::Compute::zero(); STREAM_CHUNK]);
    let mut narrow = ChunkLines([S::zero(); STREAM_CHUNK]);
    let mut start = head;
    while start + STREAM_CHUNK <= n {
        if (start - head).is_multiple_of(BLOCK) {
            prefetch_next_block(&ins, start);
        }
        for (w, x) in wide.iter_mut().zip(&ins) {
            let x = &x[start..start + STREAM_CHUNK];
            for (d, s) in w.0.chunks_exact_mut(32).zip(x.chunks_exact(32)) {
                // SAFETY: the caller's contract; 32 lanes each.
                unsafe {
                    I::widen32(
                        s.try_into().expect("32 lanes"),
                        d.try_into().expect("32 lanes"),
                    )
                };
            }
        }
        let xs: [&[Lane<S>; STREAM_CHUNK]; N] = std::array::from_fn(|i| {
            bytemuck::cast_slice(&wide[i].0[..])
                .try_into()
                .expect("one chunk")
        });
        let r: &mut [Lane<S>; STREAM_CHUNK] = bytemuck::cast_slice_mut(&mut res.0[..])
            .try_into()
            .expect("one chunk");
        apply_block(&kernel, xs, r);
        let dst = &mut out[start..start + STREAM_CHUNK];
        let to: &mut [S] = if streamed { &mut narrow.0 } else { dst };
        for (d, s) in to.chunks_exact_mut(32).zip(res.0.chunks_exact(32)) {
            let (s, d) = (
                s.try_into().expect("32 lanes"),
                d.try_into().expect("32 lanes"),
            );
            // SAFETY: the caller's contract; 32 lanes each.
            unsafe { I::narrow32(s, d) };
        }
        if streamed {
            let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut out[start..start + STREAM_CHUNK]);
            // SAFETY: `dst` starts on a line (`head` is `out`'s first and
            // `STREAM_CHUNK` elements of a half type are two lines) and is
            // 128 bytes long, as the chunk is. The features are the
            // caller's contract.
            unsafe { I::stream(dst, bytemuck::cast_slice(&narrow.0)) };
        }
        start += STREAM_CHUNK;
    }
    for (j, o) in out[start..].iter_mut().enumerate() {
        *o = one(&kernel, std::array::from_fn(|i| ins[i][start + j]));
    }
}

/// [`convert_chunks`] on AVX-512 narrowing with AVX-512 BF16: rounding
/// with integer instructions instead makes bf16 kernels without a form
/// markedly slower than their f16 ones.
///
/// # Safety
/// The CPU has what [`Isa::Avx512`] stands for and AVX-512 BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt,avx512bf16"
)]
unsafe fn convert_chunks_avx512bf16<K: MapFn<N>, S: TileIo, const N: usize>(
    kernel: &K,
    ins: [&[S]; N],
    out: &mut [S],
    streamed: bool,
) {
    // SAFETY: the caller's contract, and this function's features.
    unsafe { convert_chunks::<K, S, N, Avx512Chunks<true>>(kernel, ins, out, streamed) }
}

/// [`convert_chunks`] with `mode`'s conversions, for the AVX-512 mode
/// (bf16 narrowing with AVX-512 BF16 where the CPU has it) and the AVX2
/// one (bf16 narrowing with integer rounding: chunked, it measured faster
/// than the tile buffers' three passes, see bench/RESULTS.md); false
/// (nothing done) otherwise.
///
/// # Safety
/// As for [`Mode::run`], inlined into `mode`'s dispatch; with `streamed`
/// the caller fences.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn convert_chunks_on<K: MapFn<N>, S: TileIo, const N: usize>(
    mode: Mode,
    kernel: &K,
    ins: [&[S]; N],
    out: &mut [S],
    streamed: bool,
) -> bool {
    match mode {
        Mode::Avx512 if S::DTYPE == DType::BF16 && is_x86_feature_detected!("avx512bf16") => {
            // SAFETY: `Avx512` only on such a CPU (the caller's
            // contract), and it has AVX-512 BF16.
            unsafe { convert_chunks_avx512bf16(kernel, ins, out, streamed) }
        }
        // SAFETY: `Avx512` only on such a CPU, inside its dispatch (the
        // caller's contract).
        Mode::Avx512 => unsafe {
            convert_chunks::<K, S, N, Avx512Chunks<false>>(kernel, ins, out, streamed)
        },
        // SAFETY: as above, for AVX2.
        Mode::Avx2 => unsafe { convert_chunks::<K, S, N, Avx2Chunks>(kernel, ins, out, streamed) },
        Mode::Plain | Mode::Fma => return false,
    }
    true
}

impl<K: MapFn<N>, C: Float, const N: usize> StreamMap<'_, K, C, N> {
    /// # Safety
    /// As for [`Mode::run`].
    #[inline(always)]
    unsafe fn go(self, mode: Mode) {
        let n = self.out.len();
        // An f32 vector form streams from registers: no staging tile.
        let simd_loop = f32_form::<K, C, N>(self.kernel, mode);
        #[cfg(target_arch = "x86_64")]
        if let (Mode::Avx512, None) = (mode, simd_loop) {
            let ins = self.ins.map(bytemuck::cast_slice::<C, C::Fma>);
            let out = bytemuck::cast_slice_mut::<C, C::Fma>(self.out);
            // SAFETY: `Avx512` only on such a CPU (the caller's contract);
            // the caller fences (this type's contract).
            return unsafe { stream_chunks_avx512(self.kernel, ins, out) };
        }
        let cap = match simd_loop {
            Some(_) => self.res.len().max(1),
            None => staged_tile::<C>(self.res.len()),
        };
        let mut start = 0;
        while start < n {
            let len = cap.min(n - start);
            let ahead = (start + len)..(start + 2 * len).min(n);
            for x in &self.ins {
                prefetch_op_loop(&x[ahead.clone()]);
            }
            if let Some(simd_loop) = simd_loop {
                let x: &[f32] = bytemuck::cast_slice(&self.ins[0][start..start + len]);
                let out: &mut [f32] = bytemuck::cast_slice_mut(&mut self.out[start..start + len]);
                // SAFETY: a form's loop only in the AVX-512 or AVX2 mode,
                // so on such a CPU (the caller's contract); both slices
                // are `len` long; the caller fences (this type's
                // contract).
                unsafe { simd_loop(x, out, Stores::Streamed) };
                start += len;
                continue;
            }
            let tile = MapTile {
                kernel: self.kernel,
                ins: self.ins.map(|x| &x[start..start + len]),
                out: &mut self.res[..len],
            };
            // SAFETY: the caller's contract.
            unsafe { mode.run(tile) };
            stream_copy(&mut self.out[start..start + len], &self.res[..len]);
            start += len;
        }
    }
}

mode_tile_job!(StreamMap<'_, K, C, N>, C: Float);

/// `out[j] = kernel(ins[0][j], ..)` over storage slices whose type is not
/// its compute type (f16, bf16): on AVX-512 and AVX2, a vector form's
/// loop or `convert_chunks`, converting in
/// registers; otherwise a tile at a time, each input converted into its
/// L1 buffer, the kernel run into `res`, and the result converted back,
/// all inside one dispatch. With `staged` (crate-internal), the output is
/// written with streaming stores, which the caller then fences on the
/// same thread: from registers where those loops run, otherwise
/// converted into that L1 buffer and copied out.
pub struct ConvertMap<'a, K, S: TileIo, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, each `out.len()` long.
    pub ins: [&'a [S]; N],
    /// The result.
    pub out: &'a mut [S],
    /// One tile buffer per input, each at least `res.len()` long.
    pub bufs: [&'a mut [S::Compute]; N],
    /// The tile's result; its length is the tile size.
    pub res: &'a mut [S::Compute],
    /// Asks for streaming stores, for outputs past the caches: a buffer of
    /// at least `res.len()` elements to convert the result into and stream
    /// out from when no vector form runs (unused when one does). Crate-private
    /// (so only the crate builds a `ConvertMap`): streamed stores need the
    /// fence that safe callers could forget.
    pub(crate) staged: Option<&'a mut [S]>,
}

impl<K: MapFn<N>, S: TileIo, const N: usize> ConvertMap<'_, K, S, N> {
    /// # Safety
    /// As for [`Mode::run`].
    #[inline(always)]
    unsafe fn go(self, mode: Mode) {
        let n = self.out.len();
        let mut bufs = self.bufs;
        let mut staged = self.staged;
        // A vector form converts in registers, skipping the tile buffers,
        // and streams from them when asked to.
        let simd_loop = form_loops(self.kernel, mode).and_then(|l| S::half_loop(&l));
        // Without a form, convert in registers a chunk at a time.
        #[cfg(target_arch = "x86_64")]
        if simd_loop.is_none() {
            let streamed = staged.is_some();
            // SAFETY: the caller's contract; with `staged` the caller
            // fences (this type's contract).
            if unsafe { convert_chunks_on(mode, self.kernel, self.ins, self.out, streamed) } {
                return;
            }
        }
        let cap = match (&simd_loop, &staged) {
            (None, Some(_)) => staged_tile::<S>(self.res.len()),
            _ => self.res.len().max(1),
        };
        let mut start = 0;
        while start < n {
            let len = cap.min(n - start);
            let ahead = (start + len)..(start + 2 * len).min(n);
            if let Some(simd_loop) = simd_loop {
                prefetch_op_loop(&self.ins[0][ahead]);
                let x = &self.ins[0][start..start + len];
                let out = &mut self.out[start..start + len];
                // Streamed straight from registers: no staging buffer.
                let stores = match staged {
                    Some(_) => Stores::Streamed,
                    None => Stores::Cached,
                };
                // SAFETY: a form's loop only in the AVX-512 or AVX2 mode,
                // so on such a CPU (the caller's contract); both slices
                // are `len` long; with `staged` the caller fences (its
                // contract).
                unsafe { simd_loop(x, out, stores) };
                start += len;
                continue;
            }
            for (buf, x) in bufs.iter_mut().zip(&self.ins) {
                prefetch_op_loop(&x[ahead.clone()]);
                S::load(&x[start..start + len], &mut buf[..len]);
            }
            let ins: [&[S::Compute]; N] = std::array::from_fn(|i| &bufs[i][..len]);
            let tile = MapTile {
                kernel: self.kernel,
                ins,
                out: &mut self.res[..len],
            };
            // SAFETY: the caller's contract.
            unsafe { mode.run(tile) };
            match staged.as_deref_mut() {
                Some(buf) => {
                    S::store(&mut buf[..len], &self.res[..len], false);
                    stream_copy(&mut self.out[start..start + len], &buf[..len]);
                }
                None => S::store(&mut self.out[start..start + len], &self.res[..len], false),
            }
            start += len;
        }
    }
}

mode_tile_job!(ConvertMap<'_, K, S, N>, S: TileIo);

/// `out[i][j] = d input_i` at element `j`: a gradient kernel over tiles.
pub struct GradTile<'a, K, C, const N: usize> {
    /// The op's backward kernel.
    pub kernel: &'a K,
    /// The output gradient.
    pub dy: &'a [C],
    /// The forward output (zeros when the gradient does not read it).
    pub y: &'a [C],
    /// The inputs (zeros when the gradient does not read them).
    pub xs: [&'a [C]; N],
    /// One gradient per input.
    pub out: [&'a mut [C]; N],
}

impl<K: MapGrad<N>, C: Float, const N: usize> TileJob for GradTile<'_, K, C, N> {
    /// Whole blocks as fixed-size arrays, then the remainder (see
    /// `BLOCK`).
    #[inline(always)]
    fn run(self) {
        let n = self.dy.len();
        let kernel = *self.kernel; // see `MapTile::run`
        let (dy, y) = (&self.dy[..n], &self.y[..n]);
        let xs: [&[C]; N] = self.xs.map(|s| &s[..n]);
        let mut out: [&mut [C]; N] = self.out.map(|o| &mut o[..n]);
        let whole = n - n % BLOCK;
        for start in (0..whole).step_by(BLOCK) {
            let block = start..start + BLOCK;
            let dy: &[C; BLOCK] = dy[block.clone()].try_into().expect("inside");
            let y: &[C; BLOCK] = y[block.clone()].try_into().expect("inside");
            let xs: [&[C; BLOCK]; N] = xs.map(|s| s[block.clone()].try_into().expect("inside"));
            let g: [&mut [C; BLOCK]; N] = out
                .each_mut()
                .map(|o| (&mut o[block.clone()]).try_into().expect("inside"));
            for j in 0..BLOCK {
                let r = kernel.apply(dy[j], y[j], std::array::from_fn(|i| xs[i][j]));
                for i in 0..N {
                    g[i][j] = r[i];
                }
            }
        }
        for j in whole..n {
            let r = kernel.apply(dy[j], y[j], std::array::from_fn(|i| xs[i][j]));
            for i in 0..N {
                out[i][j] = r[i];
            }
        }
    }

    #[inline(always)]
    fn run_fma(self) {
        GradTile {
            kernel: self.kernel,
            dy: bytemuck::cast_slice::<C, C::Fma>(self.dy),
            y: bytemuck::cast_slice::<C, C::Fma>(self.y),
            xs: self.xs.map(bytemuck::cast_slice::<C, C::Fma>),
            out: self.out.map(bytemuck::cast_slice_mut::<C, C::Fma>),
        }
        .run()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::hints::{self, Switches, stream_fence};
    use crate::engine::isa::{Isa, run, run_with, set_active};
    /// `x0 * 2 - x1`, with a branch, as an op author would write it.
    #[derive(Clone, Copy)]
    struct TwiceMinus;
    impl MapFn<2> for TwiceMinus {
        fn apply<T: Float>(&self, x: &mut [T; 2]) -> T {
            let d = x[0] * T::from_f64(2.0) - x[1];
            if d < T::zero() { -d } else { d }
        }
    }

    /// d/dx0 and d/dx1 of `dy * (x0 * 2 - x1)`, plus `y`.
    #[derive(Clone, Copy)]
    struct TwiceMinusGrad;
    impl MapGrad<2> for TwiceMinusGrad {
        fn apply<T: Float>(&self, dy: T, y: T, x: [T; 2]) -> [T; 2] {
            [dy * T::from_f64(2.0) + y, -dy * x[1]]
        }
    }

    #[test]
    fn op_loop_prefetch_changes_no_result() {
        // Long enough for the loop to prefetch (`PREFETCH_MIN`), ragged.
        let n = 100_003;
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
        let before = hints::op_loop_prefetch_enabled();
        let outs: Vec<Vec<f32>> = [true, false]
            .into_iter()
            .map(|on| {
                hints::set_op_loop_prefetch(on);
                assert_eq!(hints::op_loop_prefetch_enabled(), on);
                let mut out = vec![0f32; n];
                run(MapTile {
                    kernel: &TwiceMinus,
                    ins: [&a, &b],
                    out: &mut out,
                });
                out
            })
            .collect();
        hints::set_op_loop_prefetch(before);
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| (x * 2.0 - y).abs()).collect();
        assert_eq!(outs[0], want);
        assert_eq!(outs[1], want);
    }

    #[test]
    fn grad_tile_covers_every_element_of_any_length() {
        for n in [0, 1, 255, 256, 257, 1000, 1024] {
            let v = |k: usize, s: f32| -> Vec<f32> {
                (0..n).map(|i| ((i * k) % 53) as f32 * s - 3.0).collect()
            };
            let (dy, y, a, b) = (v(3, 0.5), v(5, 0.25), v(7, 0.125), v(11, 1.5));
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let (mut g0, mut g1) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                let job = GradTile {
                    kernel: &TwiceMinusGrad,
                    dy: &dy,
                    y: &y,
                    xs: [&a[..], &b[..]],
                    out: [&mut g0[..], &mut g1[..]],
                };
                run_with(isa, job);
                for j in 0..n {
                    assert_eq!(g0[j], dy[j] * 2.0 + y[j], "n = {n}, element {j}");
                    assert_eq!(g1[j], -dy[j] * b[j], "n = {n}, element {j}");
                }
            }
        }
    }

    #[test]
    fn map_tile_covers_every_element_of_any_length() {
        // around the block size, and long enough to take the prefetching
        // path (64 KB of output), with and without a remainder
        for n in [0, 1, 255, 256, 257, 1000, 16_384, 16_384 + 17, 40_000] {
            let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25 - 7.0).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 31) as f32 * 0.5).collect();
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut out = vec![f32::NAN; n];
                let job = MapTile {
                    kernel: &TwiceMinus,
                    ins: [&a[..], &b[..]],
                    out: &mut out,
                };
                run_with(isa, job);
                for j in 0..n {
                    let want = (a[j] * 2.0 - b[j]).abs();
                    assert_eq!(out[j], want, "n = {n}, element {j}, {}", isa.name());
                }
            }
        }
    }

    #[test]
    fn stream_map_writes_what_map_tile_writes_at_any_alignment() {
        fn check<C: Float + std::fmt::Debug>() {
            let line = 64 / std::mem::size_of::<C>();
            let src = |k: usize| -> Vec<C> {
                (0..5000)
                    .map(|i| C::from_f64(((i * k) % 97) as f64 * 0.25 - 7.0))
                    .collect()
            };
            let (a, b) = (src(1), src(7));
            let guard = C::from_f64(-1234.5);
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                if !isa.is_supported() {
                    continue;
                }
                for len in [0, 1, 63, 64, 65, 200, 1024, 1025, 4000] {
                    let mut want = vec![guard; len];
                    run_with(
                        isa,
                        MapTile {
                            kernel: &TwiceMinus,
                            ins: [&a[..len], &b[..len]],
                            out: &mut want,
                        },
                    );
                    for offset in 0..=line {
                        let mut dst = vec![guard; len + 2 * line + 1];
                        let mut res = vec![C::zero(); 1024];
                        run_with(
                            isa,
                            StreamMap {
                                kernel: &TwiceMinus,
                                ins: [&a[..len], &b[..len]],
                                out: &mut dst[offset..offset + len],
                                res: &mut res,
                            },
                        );
                        stream_fence();
                        let at = |j: usize| format!("{isa:?} len {len} offset {offset} [{j}]");
                        for (j, w) in want.iter().enumerate() {
                            assert_eq!(dst[offset + j].to_f64(), w.to_f64(), "{}", at(j));
                        }
                        assert!(
                            dst[..offset].iter().all(|&v| v.to_f64() == -1234.5),
                            "{}",
                            at(0)
                        );
                        assert!(
                            dst[offset + len..].iter().all(|&v| v.to_f64() == -1234.5),
                            "{}",
                            at(len)
                        );
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }

    #[test]
    fn convert_map_writes_each_rounded_result_at_any_alignment() {
        fn check<S: TileIo<Compute = f32> + std::fmt::Debug>() {
            let line = 64 / std::mem::size_of::<S>();
            let specials = [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                6.0e-8,
                -1.0e-40,
                65504.0,
                3.0e38,
                1.0 + 1.0 / 2048.0,
            ];
            let src = |k: usize| -> Vec<S> {
                (0..5000)
                    .map(|i| match (i * k) % 61 {
                        j @ 0..10 => S::from_compute(specials[j]),
                        j => S::from_compute(((i * k) % 97) as f32 * 0.37 - 17.0 + j as f32 * 1e-3),
                    })
                    .collect()
            };
            let (a, b) = (src(1), src(7));
            let guard = S::from_compute(-1234.5);
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                if !isa.is_supported() {
                    continue;
                }
                for len in [0, 1, 31, 32, 63, 64, 65, 200, 1024, 1025, 4000] {
                    let wide =
                        |x: &[S]| -> Vec<f32> { x[..len].iter().map(|v| v.to_compute()).collect() };
                    let (wa, wb) = (wide(&a), wide(&b));
                    let mut res = vec![0.0f32; len];
                    run_with(
                        isa,
                        MapTile {
                            kernel: &TwiceMinus,
                            ins: [&wa[..], &wb[..]],
                            out: &mut res,
                        },
                    );
                    let want: Vec<S> = res.iter().map(|&r| S::from_compute(r)).collect();
                    for streamed in [false, true] {
                        for offset in 0..=line {
                            let mut dst = vec![guard; len + 2 * line + 1];
                            let (mut b0, mut b1, mut r) =
                                (vec![0.0; 512], vec![0.0; 512], vec![0.0; 512]);
                            let mut staged = [S::zero(); 512];
                            run_with(
                                isa,
                                ConvertMap {
                                    kernel: &TwiceMinus,
                                    ins: [&a[..len], &b[..len]],
                                    out: &mut dst[offset..offset + len],
                                    bufs: [&mut b0, &mut b1],
                                    res: &mut r,
                                    staged: streamed.then_some(&mut staged[..]),
                                },
                            );
                            stream_fence();
                            let at = |j: usize| {
                                format!(
                                    "{isa:?} streamed {streamed} len {len} offset {offset} [{j}]"
                                )
                            };
                            for (j, w) in want.iter().enumerate() {
                                let got = dst[offset + j];
                                let same = bytemuck::cast::<S, u16>(got)
                                    == bytemuck::cast::<S, u16>(*w)
                                    || (got.is_nan() && w.is_nan());
                                assert!(same, "{}: {got:?} != {w:?}", at(j));
                            }
                            let untouched =
                                |v: &[S]| v.iter().all(|&v| v.to_compute() == guard.to_compute());
                            assert!(untouched(&dst[..offset]), "{}", at(0));
                            assert!(untouched(&dst[offset + len..]), "{}", at(len));
                        }
                    }
                }
            }
        }
        check::<half::f16>();
        check::<half::bf16>();
    }

    /// `x0 + x1`: with the right second inputs, sums that tie, overflow
    /// past the maximum, land among subnormals, or carry a NaN's payload
    /// (a sum with one NaN is that NaN, made quiet).
    #[derive(Clone, Copy)]
    struct Sum;
    impl MapFn<2> for Sum {
        fn apply<T: Float>(&self, x: &mut [T; 2]) -> T {
            x[0] + x[1]
        }
    }

    /// `x` itself: the conversions alone.
    #[derive(Clone, Copy)]
    struct Same;
    impl MapFn<1> for Same {
        fn apply<T: Float>(&self, x: &mut [T; 1]) -> T {
            x[0]
        }
    }

    /// `job`'s `ConvertMap` over `ins` into a fresh output of their
    /// length, on `isa`, streamed or not.
    fn convert_on<K: MapFn<N>, S: TileIo<Compute = f32>, const N: usize>(
        isa: Isa,
        kernel: &K,
        ins: [&[S]; N],
        streamed: bool,
    ) -> Vec<u16> {
        let n = ins[0].len();
        let mut out = vec![S::zero(); n];
        let mut bufs: [Vec<f32>; N] = std::array::from_fn(|_| vec![0.0; 256]);
        let (mut res, mut staged) = (vec![0.0f32; 256], vec![S::zero(); 256]);
        run_with(
            isa,
            ConvertMap {
                kernel,
                ins,
                out: &mut out,
                bufs: bufs.each_mut().map(|b| &mut b[..]),
                res: &mut res,
                staged: streamed.then_some(&mut staged[..]),
            },
        );
        stream_fence();
        out.iter().map(|&v| bytemuck::cast::<S, u16>(v)).collect()
    }

    /// The AVX2 chunked conversion against the tile buffers' (the plain
    /// mode's) and against `half` element by element, bit for bit: every
    /// 16-bit pattern (both zeros and infinities, every NaN payload,
    /// every subnormal, the largest values) alone and summed with values
    /// that make ties, overflow and subnormal sums, over the whole range
    /// and over short runs with tails of every length. AVX-512 too, where
    /// the CPU has it.
    #[test]
    fn avx2_chunked_conversions_match_the_tile_path_bit_for_bit() {
        fn check<S: TileIo<Compute = f32>>(addends: &[f32]) {
            let every: Vec<S> = (0..=u16::MAX).map(bytemuck::cast::<u16, S>).collect();
            let others: Vec<S> = (0..every.len())
                .map(|j| S::from_compute(addends[j * 7 % addends.len()]))
                .collect();
            let runs = std::iter::once((0, every.len())).chain(
                [0, 0x7bf0, 0x7f70, 0xfbf0, 0xff70]
                    .into_iter()
                    .flat_map(|at| (0..=67).chain([95, 127, 128, 129]).map(move |n| (at, n))),
            );
            for (at, n) in runs {
                let (a, b) = (&every[at..at + n], &others[at..at + n]);
                let bits = |v: S| bytemuck::cast::<S, u16>(v);
                let want_sum: Vec<u16> = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| bits(S::from_compute(x.to_compute() + y.to_compute())))
                    .collect();
                let want_same: Vec<u16> = a
                    .iter()
                    .map(|x| bits(S::from_compute(x.to_compute())))
                    .collect();
                for streamed in [false, true] {
                    let tiled_sum = convert_on(Isa::Scalar, &Sum, [a, b], streamed);
                    let tiled_same = convert_on(Isa::Scalar, &Same, [a], streamed);
                    assert_eq!(tiled_sum, want_sum, "{} plain sum", S::DTYPE);
                    assert_eq!(tiled_same, want_same, "{} plain", S::DTYPE);
                    for isa in [Isa::Avx2, Isa::Avx512] {
                        if !isa.is_supported() {
                            continue;
                        }
                        let how = format!("{} {isa:?} at {at:#x}, {n} long, {streamed}", S::DTYPE);
                        let sum = convert_on(isa, &Sum, [a, b], streamed);
                        assert_eq!(sum, want_sum, "{how}: sum");
                        assert_eq!(convert_on(isa, &Same, [a], streamed), want_same, "{how}");
                    }
                }
            }
        }
        if !Isa::Avx2.is_supported() {
            eprintln!("skipped: this CPU (or valgrind) lacks AVX2, FMA or F16C");
            return;
        }
        let p = |e: i32| 2f32.powi(e);
        // Half an ulp of 1 (a tie with every other value near 1) and of
        // the largest values (a tie past which they round to infinity),
        // the least subnormal, and others.
        check::<half::f16>(&[
            0.0,
            -0.0,
            1.0,
            -1.0,
            p(-11),
            p(-9),
            3.0 * p(-12),
            8.0,
            16.0,
            p(-24),
        ]);
        let least = f32::from_bits(1 << 16);
        check::<half::bf16>(&[
            0.0,
            -0.0,
            1.0,
            -1.0,
            p(-8),
            p(-7),
            3.0 * p(-9),
            p(119),
            p(118),
            least,
        ]);
    }

    #[test]
    fn bf16_stores_match_half_with_and_without_add() {
        // Every field, subnormals included (AVX-512 BF16 flushes them, so
        // this checks the fallback), at lengths with and without a tail.
        let xs: Vec<f32> = (0..100_003u32)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9)))
            .chain([f32::from_bits(1), -1.0e-39, 1.1754942e-38, f32::NAN])
            .collect();
        let olds: Vec<half::bf16> = xs
            .iter()
            .rev()
            .map(|x| half::bf16::from_f32(x * 0.5))
            .collect();
        let _switches = Switches::hold();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if set_active(isa).is_err() {
                continue;
            }
            for len in [xs.len(), 16, 15, 33] {
                let mut got = vec![half::bf16::ZERO; len];
                <half::bf16 as TileIo>::store(&mut got, &xs[..len], false);
                let mut summed = olds[..len].to_vec();
                <half::bf16 as TileIo>::store(&mut summed, &xs[..len], true);
                for (j, x) in xs[..len].iter().enumerate() {
                    let want = half::bf16::from_f32(*x);
                    assert_eq!(got[j].to_bits(), want.to_bits(), "{isa:?} {x:e}");
                    let want = half::bf16::from_f32(olds[j].to_f32() + x);
                    assert_eq!(summed[j].to_bits(), want.to_bits(), "{isa:?} add {x:e}");
                }
            }
        }
    }
}
