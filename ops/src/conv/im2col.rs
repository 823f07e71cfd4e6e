//! Column matrices for one image and one channel group: row `(c, kd, kh,
//! kw)` holds, for each output position of a tile, the input element that
//! tap of the window reads there (zero in the padding). A tile is a range
//! of output rows `r = od·OH + oh`, whole rows of `OW` columns, so the
//! matrix is `k_len × (rows · OW)`. [`col2im`] is the adjoint: it adds
//! each column entry back onto the input element it came from.

use simpleop::Float;

use super::geom::Geom;

/// The output columns `lo..hi` along one axis whose tap at offset `off`
/// (`o·stride + off` is the input index) lands inside `0..len`.
#[inline(always)]
pub(super) fn valid(len: usize, out: usize, stride: usize, off: isize) -> (usize, usize) {
    let s = stride as isize;
    // Smallest o with o·s + off ≥ 0.
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    // Smallest o with o·s + off ≥ len.
    let hi = if off >= len as isize {
        0
    } else {
        (len as isize - off + s - 1) / s
    };
    let lo = (lo as usize).min(out);
    (lo, (hi as usize).clamp(lo, out))
}

/// Where one tap of the window reads along the two outer axes for output
/// row `r`, or `None` when that row of the input is padding.
#[inline(always)]
pub(super) fn source_row(g: &Geom, tap: [usize; 3], r: usize) -> Option<usize> {
    let (od, oh) = (r / g.out[1], r % g.out[1]);
    let at = |a: usize, o: usize| {
        let i = (o * g.stride[a] + tap[a] * g.dilate[a]) as isize - g.pad[a] as isize;
        (0..g.inp[a] as isize).contains(&i).then_some(i as usize)
    };
    Some(at(0, od)? * g.inp[1] + at(1, oh)?)
}

/// Every tap `(c, kd, kh, kw)` in row order, with its row index.
pub(super) fn taps(g: &Geom) -> impl Iterator<Item = (usize, usize, [usize; 3])> + '_ {
    let k = g.kernel;
    (0..g.cin_g()).flat_map(move |c| {
        (0..k[0]).flat_map(move |kd| {
            (0..k[1]).flat_map(move |kh| {
                (0..k[2]).map(move |kw| {
                    let row = ((c * k[0] + kd) * k[1] + kh) * k[2] + kw;
                    (row, c, [kd, kh, kw])
                })
            })
        })
    })
}

/// Fills `col` (`k_len × (r1 − r0)·OW`) from `x`, one group's channels
/// of one image (`cin_g × in_vol`).
#[inline(always)]
pub(crate) fn im2col<T: Float>(g: &Geom, x: &[T], rows: (usize, usize), col: &mut [T]) {
    let (r0, r1) = rows;
    let (ow, iw) = (g.out[2], g.inp[2]);
    let width = (r1 - r0) * ow;
    let in_vol = g.in_vol();
    for (row, c, tap) in taps(g) {
        let dst = &mut col[row * width..][..width];
        let off = (tap[2] * g.dilate[2]) as isize - g.pad[2] as isize;
        let (lo, hi) = valid(iw, ow, g.stride[2], off);
        for r in r0..r1 {
            let seg = &mut dst[(r - r0) * ow..][..ow];
            let Some(src_row) = source_row(g, tap, r) else {
                seg.fill(T::zero());
                continue;
            };
            let src = &x[c * in_vol + src_row * iw..][..iw];
            seg[..lo].fill(T::zero());
            seg[hi..].fill(T::zero());
            if lo == hi {
                continue;
            }
            // In bounds: `valid` keeps columns whose input lies in 0..iw.
            let first = ((lo * g.stride[2]) as isize + off) as usize;
            if g.stride[2] == 1 {
                seg[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
            } else {
                let taken = src[first..].iter().step_by(g.stride[2]);
                for (d, &v) in seg[lo..hi].iter_mut().zip(taken) {
                    *d = v;
                }
            }
        }
    }
}

/// Adds `col` (`k_len × (r1 − r0)·OW`) onto `x` (`cin_g × in_vol`), the
/// adjoint of [`im2col`].
#[inline(always)]
pub(crate) fn col2im<T: Float>(g: &Geom, col: &[T], rows: (usize, usize), x: &mut [T]) {
    let (r0, r1) = rows;
    let (ow, iw) = (g.out[2], g.inp[2]);
    let width = (r1 - r0) * ow;
    let in_vol = g.in_vol();
    for (row, c, tap) in taps(g) {
        let src = &col[row * width..][..width];
        let off = (tap[2] * g.dilate[2]) as isize - g.pad[2] as isize;
        let (lo, hi) = valid(iw, ow, g.stride[2], off);
        if lo >= hi {
            continue;
        }
        for r in r0..r1 {
            let Some(dst_row) = source_row(g, tap, r) else {
                continue;
            };
            let dst = &mut x[c * in_vol + dst_row * iw..][..iw];
            let seg = &src[(r - r0) * ow..][..ow];
            let first = ((lo * g.stride[2]) as isize + off) as usize;
            let targets = dst[first..].iter_mut().step_by(g.stride[2]);
            for (d, &v) in targets.zip(&seg[lo..hi]) {
                *d += v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_columns_clip_to_the_input() {
        // len 5, stride 2, taps at -1: inputs -1, 1, 3, 5 → columns 1..3.
        assert_eq!(valid(5, 4, 2, -1), (1, 3));
        assert_eq!(valid(5, 3, 1, 0), (0, 3));
        assert_eq!(valid(5, 3, 1, 4), (0, 1));
        assert_eq!(valid(5, 3, 1, 7), (0, 0));
        assert_eq!(valid(2, 3, 1, -5), (3, 3));
    }
}
