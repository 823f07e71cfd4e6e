//! Building an op's f16/bf16 lookup table at its first use, and timing it
//! against computing ([`super::table`] holds the tables and reads them).

use std::time::{Duration, Instant};

use crate::Float;
use crate::dtype::Element;
use crate::engine::buffers::{TILE, with_buffers};
use crate::engine::half_io::TileIo;
use crate::engine::isa as simd;
use crate::engine::table::{HalfTable, HalfTables, PATTERNS, Route, TIMING, TIMING_SAMPLE};
use crate::engine::tiles::{ConvertMap, MapTile};
use crate::kernel::MapFn;

impl HalfTables {
    /// The table of `kernel` over storage type `S`, built now if this is
    /// its first use; `None` for types that are not 16 bits wide, and when
    /// computing is faster on this machine.
    pub(crate) fn get<S: TileIo, K: MapFn<N>, const N: usize>(
        &self,
        kernel: &K,
    ) -> Option<&HalfTable> {
        let isa = simd::active();
        let route = self.slot::<S>(isa)?.get_or_init(|| {
            // A kernel that breaks the contract and panics on some pattern
            // loses its table, not the call: it computes from then on.
            // The timing runs the kernel too, so it is inside the catch.
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let table = HalfTable::build::<S, K, N>(kernel);
                let faster = !TIMING.get() || table.beats_computing::<S, K, N>(kernel);
                (table, faster)
            }));
            match built {
                Err(_) => Route::Panicked,
                Ok((table, true)) => Route::Table(table),
                Ok((_, false)) => Route::Slower,
            }
        });
        let Route::Table(table) = route else {
            return None;
        };
        // Each set has its own slot; the check keeps a table of another
        // set (whose vector math may differ in the last bit) unread even
        // if the active set changed while this one was being built.
        (table.isa == isa).then_some(table)
    }
}

impl HalfTable {
    /// Runs `kernel` (arity 1; every input slot gets the same patterns)
    /// over every pattern of `S` the way the compute path does.
    fn build<S: TileIo, K: MapFn<N>, const N: usize>(kernel: &K) -> HalfTable {
        debug_assert_eq!(std::mem::size_of::<S>(), 2);
        let isa = simd::active();
        let patterns: Vec<u16> = (0..=u16::MAX).collect();
        let xs: Vec<S> = patterns
            .iter()
            .map(|&b| bytemuck::cast::<u16, S>(b))
            .collect();
        let mut wide = vec![S::Compute::zero(); PATTERNS];
        S::load(&xs, &mut wide);
        let mut res = vec![S::Compute::zero(); PATTERNS];
        simd::run_with(
            isa,
            MapTile {
                kernel,
                ins: std::array::from_fn(|_| &wide[..]),
                out: &mut res,
            },
        );
        let mut out = vec![S::zero(); PATTERNS];
        S::store(&mut out, &res, false);
        let mut entries: Vec<u16> = out.iter().map(|&v| bytemuck::cast::<S, u16>(v)).collect();
        entries.push(0);
        HalfTable {
            entries: entries.into_boxed_slice(),
            isa,
        }
    }

    /// Whether reading this table is faster than converting and computing
    /// (the route a call takes without it) on this machine: both timed on
    /// one thread over [`TIMING_SAMPLE`] scattered values, fastest of five
    /// alternating runs each. Gathers are quick on some CPUs and slow on
    /// others (see the module documentation), so this is measured, once
    /// per op and type, never assumed.
    fn beats_computing<S: TileIo, K: MapFn<N>, const N: usize>(&self, kernel: &K) -> bool {
        // Normal values in -8..8 in scattered order, as data are: NaN and
        // subnormal patterns take the conversions' slow paths, and sorted
        // values would make the gathers read in order.
        let wide: Vec<S::Compute> = (0..TIMING_SAMPLE)
            .map(|i| {
                let k = (i * 40_503) % TIMING_SAMPLE;
                S::Compute::from_f64(16.0 * k as f64 / TIMING_SAMPLE as f64 - 8.0)
            })
            .collect();
        let mut typed = vec![S::zero(); TIMING_SAMPLE];
        S::store(&mut typed, &wide, false);
        let typed = &typed[..];
        let xs: &[u16] = bytemuck::cast_slice(typed);
        let mut out = vec![0u16; TIMING_SAMPLE];
        let mut looked_up = vec![0u16; TIMING_SAMPLE];
        let (mut table, mut computed) = (Duration::MAX, Duration::MAX);
        // The tile buffers the drivers' compute route uses.
        with_buffers::<S::Compute, _>(N + 1, TILE, |mut b| {
            let mut bufs: [&mut [S::Compute]; N] = std::array::from_fn(|_| b.next());
            let res = b.next();
            for _ in 0..5 {
                let t = Instant::now();
                simd::run(ConvertMap {
                    kernel,
                    ins: [typed; N],
                    out: bytemuck::cast_slice_mut(&mut out),
                    bufs: bufs.each_mut().map(|b| &mut **b),
                    res: &mut *res,
                    staged: None,
                });
                computed = computed.min(t.elapsed());
                let t = Instant::now();
                self.lookup(xs, &mut looked_up);
                table = table.min(t.elapsed());
                std::hint::black_box(&looked_up);
            }
        });
        table < computed
    }
}
