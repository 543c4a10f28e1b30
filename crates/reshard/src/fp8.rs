//! FP8 quantisation at the source: E4M3 (`f8e4m3`, the OCP "fn" variant: no infinity, NaN is
//! S.1111.111, max 448) and E5M2 (`f8e5m2`: IEEE-like, max 57344), each element divided by its
//! scale in f32, saturated to the largest finite value, and rounded to nearest even (subnormals
//! included); NaN keeps its sign. The scale is `amax / max` over the finite elements of the
//! tensor (`Scale::Tensor`) or of each 128x128 block of its last two dimensions (`Scale::Block`,
//! the layout vLLM and SGLang load as `weight_scale_inv`), 1 where that is 0; dequantising is
//! `q * scale`.
//!
//! A quantised piece travels as its FP8 bytes (C order), padded to 4 bytes, then the f32 scales
//! (little-endian) of every scale group it touches, in C order of the block grid.

use serde::{Deserialize, Serialize};

/// Side of a scale block.
pub const BLOCK: u64 = 128;

/// How a destination's FP8 tensor is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// One scale for the whole tensor.
    Tensor,
    /// One scale per 128x128 block of the last two dimensions.
    Block,
}

/// An FP8 encoding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Format {
    man: u32,
    bias: i32,
    /// Largest finite value.
    pub max: f32,
    nan: u8,
}

impl Format {
    /// Half the smallest subnormal, 2^-(bias + man), built from its exponent bits (no `powi`).
    fn half_step(self) -> f32 {
        f32::from_bits(((127 - self.bias - self.man as i32) as u32) << 23)
    }
}

/// OCP E4M3 ("fn": finite, NaN only at all ones).
pub const E4M3: Format = Format { man: 3, bias: 7, max: 448.0, nan: 0x7f };
/// OCP E5M2.
pub const E5M2: Format = Format { man: 2, bias: 15, max: 57344.0, nan: 0x7e };

/// The format of a dtype name (`f8e4m3`, `f8e5m2`).
pub fn format(dtype: &str) -> Option<Format> {
    match dtype {
        "f8e4m3" => Some(E4M3),
        "f8e5m2" => Some(E5M2),
        _ => None,
    }
}

/// `x` saturated to the format's range and rounded to nearest even. Branch-light, on the bits
/// alone so that a loop of it vectorises: the magnitude's bits are clamped to the largest
/// finite value's (a finite non-negative float orders as its bits); a normal result rounds by
/// adding half an FP8 ulp (less one, plus the kept bit for ties to even) to the f32 bits and
/// shifting; a subnormal one by adding a power of two whose f32 ulp is the FP8 subnormal step,
/// so that the float addition itself rounds to nearest even, and taking the low bits of the
/// sum. Checked against the step-by-step form in the tests.
#[inline]
pub fn encode(x: f32, f: Format) -> u8 {
    let bits = x.to_bits();
    let sign = (bits >> 24) & 0x80;
    let abs = bits & 0x7fff_ffff;
    let top = f.max.to_bits();
    let ab = if abs < top { abs } else { top }; // NaN and infinity give max here; NaN is picked out below
                                                // Both roundings are computed and one is selected, so that data of mixed magnitudes costs
                                                // no mispredicted branches. Subnormal: 2^(24 - bias - man) has the FP8 subnormal step
                                                // 2^(1 - bias - man) as its f32 ulp.
    let magic = ((151 - f.bias - f.man as i32) as u32) << 23;
    let sub = (f32::from_bits(ab) + f32::from_bits(magic)).to_bits().wrapping_sub(magic);
    // Normal: rebias the exponent from f32's 127 to the format's, then round.
    let drop = 23 - f.man;
    let norm =
        ab.wrapping_sub(((127 - f.bias) as u32) << 23).wrapping_add((1 << (drop - 1)) - 1 + ((ab >> drop) & 1)) >> drop;
    // The smallest normal FP8 value, 2^(1 - bias), as f32 bits.
    let code = if ab < ((128 - f.bias) as u32) << 23 { sub } else { norm };
    let code = if abs > 0x7f80_0000 { u32::from(f.nan) } else { code };
    (sign | code) as u8
}

/// The value of an FP8 byte (for tests and dequantising).
pub fn decode(b: u8, f: Format) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let code = b & 0x7f;
    if code == f.nan || (f.nan == 0x7e && code > 0x7c) {
        return f32::NAN;
    }
    if f.nan == 0x7e && code == 0x7c {
        return sign * f32::INFINITY;
    }
    let e = i32::from(code >> f.man);
    let m = f32::from(code & ((1 << f.man) - 1) as u8);
    let frac = m / (1 << f.man) as f32;
    sign * if e == 0 { frac * 2f32.powi(1 - f.bias) } else { (1.0 + frac) * 2f32.powi(e - f.bias) }
}

/// Magnitudes below which `x / s` encodes as zero: `s` times half the smallest subnormal
/// (2^-10 for E4M3, 2^-17 for E5M2), when that product is an exact normal f32; 0 otherwise.
fn zero_below(s: f32, f: Format) -> f32 {
    let t = s * f.half_step();
    if t.is_normal() {
        t
    } else {
        0.0
    }
}

/// The scale for a group whose largest finite magnitude is `amax`.
pub fn scale_for(amax: f32, f: Format) -> f32 {
    let s = amax / f.max;
    if s > 0.0 && s.is_finite() {
        s
    } else {
        1.0
    }
}

/// Elements `start..start + out.len()` of `src` (little-endian, of dtype `dtype`) as f32.
fn load_run(src: &[u8], dtype: &str, start: usize, out: &mut [f32]) {
    match dtype {
        "bf16" => {
            for (o, c) in out.iter_mut().zip(src[2 * start..].chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        "f16" => {
            for (o, c) in out.iter_mut().zip(src[2 * start..].chunks_exact(2)) {
                *o = half_to_f32(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        "f64" => {
            for (o, c) in out.iter_mut().zip(src[8 * start..].chunks_exact(8)) {
                *o = f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32;
            }
        }
        _ => {
            for (o, c) in out.iter_mut().zip(src[4 * start..].chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }
}

fn half_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // A subnormal half is man * 2^-24: exact in f32.
            let v = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        (31, 0) => sign | 0x7f80_0000,
        (31, _) => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// A source rank's local array: its bytes (C order), dtype, extent, and where it starts in
/// the tensor (global coordinates).
#[derive(Clone, Copy, Debug)]
pub struct Local<'a> {
    pub bytes: &'a [u8],
    pub dtype: &'a str,
    pub shape: &'a [u64],
    pub origin: &'a [u64],
}

/// Which error a quantisation call refuses with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("{0}")]
    Invalid(String),
}

/// The scale groups a box touches: per dimension of the block grid, `[first, end)` (one
/// group for `Scale::Tensor`; the last two dimensions for `Scale::Block`).
pub fn groups(boxed: &[[u64; 2]], scale: Scale) -> [[u64; 2]; 2] {
    match scale {
        Scale::Tensor => [[0, 1], [0, 1]],
        Scale::Block => {
            let n = boxed.len();
            let g = |[lo, hi]: [u64; 2]| [lo / BLOCK, hi.div_ceil(BLOCK)];
            [g(boxed[n - 2]), g(boxed[n - 1])]
        }
    }
}

/// Bytes a quantised piece of `boxed` travels in, and where its scales start.
pub fn piece_bytes(boxed: &[[u64; 2]], scale: Scale) -> (u64, u64) {
    let elems: u64 = boxed.iter().map(|[lo, hi]| hi - lo).product();
    let [r, c] = groups(boxed, scale);
    let at = elems.div_ceil(4) * 4;
    (at + 4 * (r[1] - r[0]) * (c[1] - c[0]), at)
}

fn check(local: &Local<'_>, scale: Scale) -> Result<(usize, usize), QuantError> {
    let size = match local.dtype {
        "bf16" | "f16" => 2,
        "f32" => 4,
        "f64" => 8,
        other => return Err(QuantError::Invalid(format!("cannot quantise {other} to FP8 (a float type is needed)"))),
    };
    let elems: u64 = local.shape.iter().product();
    if local.bytes.len() as u64 != elems * size || local.origin.len() != local.shape.len() {
        return Err(QuantError::Invalid(format!(
            "{} bytes for {elems} elements of {} (shape {:?}, origin {:?})",
            local.bytes.len(),
            local.dtype,
            local.shape,
            local.origin
        )));
    }
    if scale == Scale::Block && local.shape.len() < 2 {
        return Err(QuantError::Invalid("128x128 block scales need a tensor of two dimensions or more".into()));
    }
    let n = local.shape.len();
    let cols = if n == 0 { 1 } else { local.shape[n - 1] as usize };
    let rows = if n < 2 { 1 } else { local.shape[n - 2] as usize };
    Ok((rows, cols))
}

/// The scales of every group of `local` (C order over the groups its box touches), computed
/// over the elements it holds: the planner only quantises a tensor whose groups each lie in
/// one source box, so these are whole groups.
pub fn scales(local: &Local<'_>, scale: Scale, f: Format) -> Result<Vec<f32>, QuantError> {
    let (rows, cols) = check(local, scale)?;
    let boxed: Vec<[u64; 2]> = local.origin.iter().zip(local.shape).map(|(&o, &n)| [o, o + n]).collect();
    let total: usize = local.shape.iter().product::<u64>() as usize;
    let (nr, nc, r0, c0, gr, gc) = match scale {
        Scale::Tensor => (1, 1, 0, 0, [0, 1], [0, 1]),
        Scale::Block => {
            let [gr, gc] = groups(&boxed, scale);
            let n = local.shape.len();
            ((gr[1] - gr[0]) as usize, (gc[1] - gc[0]) as usize, local.origin[n - 2], local.origin[n - 1], gr, gc)
        }
    };
    // The largest finite magnitude of each group, as f32 bits (which order as the values do).
    let mut amax = vec![0u32; nr * nc];
    let mut row = vec![0f32; cols];
    for (k, start) in (0..total).step_by(cols.max(1)).enumerate() {
        load_run(local.bytes, local.dtype, start, &mut row);
        if scale == Scale::Tensor {
            amax[0] = amax[0].max(finite_amax(&row));
            continue;
        }
        let g0 = ((r0 + (k % rows) as u64) / BLOCK - gr[0]) as usize * nc;
        // One span of the row per block of columns.
        let mut c = 0usize;
        while c < cols {
            let col = c0 + c as u64;
            let end = (((col / BLOCK + 1) * BLOCK - c0) as usize).min(cols);
            let g = &mut amax[g0 + (col / BLOCK - gc[0]) as usize];
            *g = (*g).max(finite_amax(&row[c..end]));
            c = end;
        }
    }
    Ok(amax.into_iter().map(|a| scale_for(f32::from_bits(a), f)).collect())
}

/// The largest finite magnitude in `run`, as f32 bits (0 when there is none). Eight lanes of
/// running maxima, so that the loop vectorises (NaN and infinity count as 0).
fn finite_amax(run: &[f32]) -> u32 {
    let lane = |v: f32| {
        let a = (v.to_bits() & 0x7fff_ffff) as i32;
        if a < 0x7f80_0000 {
            a
        } else {
            0
        }
    };
    let mut acc = [0i32; 8];
    let mut chunks = run.chunks_exact(8);
    for c in &mut chunks {
        for (m, &v) in acc.iter_mut().zip(c) {
            let a = lane(v);
            *m = if a > *m { a } else { *m };
        }
    }
    let rest = chunks.remainder().iter().map(|&v| lane(v));
    acc.into_iter().chain(rest).max().unwrap_or(0) as u32
}

/// Writes the piece `boxed` (global coordinates, inside `local`) quantised with `grid` (the
/// scales of `local`'s groups, from [`scales`]) into `out`, in the wire layout above.
pub fn quantize(
    local: &Local<'_>,
    scale: Scale,
    f: Format,
    grid: &[f32],
    boxed: &[[u64; 2]],
    out: &mut [u8],
) -> Result<(), QuantError> {
    check(local, scale)?;
    let n = local.shape.len();
    if boxed.len() != n
        || boxed
            .iter()
            .zip(local.origin.iter().zip(local.shape))
            .any(|(&[lo, hi], (&o, &s))| lo > hi || lo < o || hi > o + s)
    {
        return Err(QuantError::Invalid(format!("piece {boxed:?} is not inside the local box")));
    }
    let (need, at) = piece_bytes(boxed, scale);
    if out.len() as u64 != need {
        return Err(QuantError::Invalid(format!("the piece takes {need} bytes, the destination holds {}", out.len())));
    }
    let own: Vec<[u64; 2]> = local.origin.iter().zip(local.shape).map(|(&o, &s)| [o, o + s]).collect();
    let [gr, gc] = groups(&own, scale);
    let nc_local = (gc[1] - gc[0]) as usize;
    let want = ((gr[1] - gr[0]) * (gc[1] - gc[0])) as usize;
    if grid.len() != want {
        return Err(QuantError::Invalid(format!("{} scales for {want} groups", grid.len())));
    }
    let group = |r: u64, c: u64| -> usize {
        match scale {
            Scale::Tensor => 0,
            Scale::Block => ((r / BLOCK - gr[0]) as usize) * nc_local + (c / BLOCK - gc[0]) as usize,
        }
    };
    // Strides of the local array, in elements.
    let mut strides = vec![1u64; n];
    for d in (0..n.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * local.shape[d + 1];
    }
    let elems: u64 = boxed.iter().map(|[lo, hi]| hi - lo).product();
    // One run per index of the leading dimensions: the last dimension's span, contiguous.
    let width = if n == 0 { 1 } else { (boxed[n - 1][1] - boxed[n - 1][0]) as usize };
    let mut run = vec![0f32; width];
    let mut lead: Vec<u64> = boxed.iter().take(n.saturating_sub(1)).map(|b| b[0]).collect();
    let mut written = 0usize;
    while written < elems as usize {
        let mut start: u64 = lead.iter().zip(local.origin).zip(&strides).map(|((&x, &o), &s)| (x - o) * s).sum();
        if n > 0 {
            start += boxed[n - 1][0] - local.origin[n - 1];
        }
        load_run(local.bytes, local.dtype, start as usize, &mut run);
        let r = if n >= 2 { lead[n - 2] } else { 0 };
        let c0 = if n >= 1 { boxed[n - 1][0] } else { 0 };
        // A span of the run within one scale group at a time: its scale and threshold once.
        let mut c = 0usize;
        while c < width {
            let col = c0 + c as u64;
            let end = match scale {
                Scale::Tensor => width,
                Scale::Block => (((col / BLOCK + 1) * BLOCK - c0) as usize).min(width),
            };
            let s = grid[group(r, col)];
            let zero = zero_below(s, f);
            for (slot, &v) in out[written + c..written + end].iter_mut().zip(&run[c..end]) {
                // `v / s` rounds to zero in FP8 below `zero` (half the smallest subnormal, or
                // a tie with it, which goes to the even zero): divide a signed zero instead,
                // since a division that makes an f32 subnormal costs the CPU a hundred cycles
                // (a select, not a branch: weights mix magnitudes).
                let v = if v.abs() < zero { f32::from_bits(v.to_bits() & 0x8000_0000) } else { v };
                *slot = encode(v / s, f);
            }
            c = end;
        }
        written += width;
        for d in (0..lead.len()).rev() {
            lead[d] += 1;
            if lead[d] < boxed[d][1] {
                break;
            }
            lead[d] = boxed[d][0];
        }
    }
    out[elems as usize..at as usize].fill(0);
    let [pr, pc] = groups(boxed, scale);
    let mut o = at as usize;
    for br in pr[0]..pr[1] {
        for bc in pc[0]..pc[1] {
            let s = grid[group(br * BLOCK, bc * BLOCK)];
            out[o..o + 4].copy_from_slice(&s.to_le_bytes());
            o += 4;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step-by-step form of `encode` (shift, compare the rest with half, carry): the oracle.
    fn encode_steps(x: f32, f: Format) -> u8 {
        let bits = x.to_bits();
        let sign = ((bits >> 31) as u8) << 7;
        if x.is_nan() {
            return sign | f.nan;
        }
        let a = x.abs().min(f.max);
        if a == 0.0 {
            return sign;
        }
        let bits = a.to_bits();
        let exp32 = (bits >> 23) as i32;
        let e = exp32 - 127 + f.bias;
        let sig = u64::from(bits & 0x7f_ffff) | if exp32 > 0 { 1 << 23 } else { 0 };
        // Bits to drop: the f32 fraction beyond the target's, plus the shift into the subnormals.
        let mut shift = 23 - f.man as i32;
        let mut code_exp = e;
        if e < 1 {
            shift += 1 - e;
            code_exp = 0;
        }
        if shift >= 40 {
            return sign;
        }
        let shift = shift as u32;
        let mut v = sig >> shift;
        let rest = sig & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rest > half || (rest == half && v & 1 == 1) {
            v += 1;
        }
        // For normals, `v` still holds the implicit bit: replace it with the exponent field (a
        // carry out of the fraction lands in the exponent, as it should).
        let code = if code_exp >= 1 { (v - (1 << f.man)) + ((code_exp as u64) << f.man) } else { v };
        sign | code as u8
    }

    #[test]
    fn the_fast_encoding_agrees_with_the_steps() {
        // Every FP8 boundary's neighbourhood (each code's value and the midpoints to its
        // neighbours, a few f32 ulps either side), then a stride through all f32 bit patterns.
        for f in [E4M3, E5M2] {
            let check = |v: f32| {
                assert_eq!(encode(v, f), encode_steps(v, f), "{v:e} ({:#x})", v.to_bits());
                assert_eq!(encode(-v, f), encode_steps(-v, f), "{:e}", -v);
            };
            for b in 0..0x7fu8 {
                let (lo, hi) = (decode(b, f), decode(b + 1, f));
                if !lo.is_finite() || !hi.is_finite() {
                    continue;
                }
                for c in [lo, (lo + hi) / 2.0, hi] {
                    for d in -3i32..=3 {
                        check(f32::from_bits(c.to_bits().wrapping_add_signed(d)));
                    }
                }
            }
            let mut bits = 0u32;
            while let Some(next) = bits.checked_add(65_521) {
                check(f32::from_bits(bits));
                bits = next;
            }
        }
    }

    /// All 2^32 f32 bit patterns, both formats: too slow for the suite (about a minute in
    /// release on two cores), run by hand after changing `encode`:
    /// `cargo test --release -p accel-reshard --lib every_f32 -- --ignored`.
    #[test]
    #[ignore]
    fn every_f32_encodes_as_the_steps() {
        for f in [E4M3, E5M2] {
            let bad = (0..=u32::MAX).find(|&b| encode(f32::from_bits(b), f) != encode_steps(f32::from_bits(b), f));
            assert_eq!(
                bad.map(|b| format!("{b:#010x}")),
                None,
                "the first f32 bit pattern that encodes otherwise, bias {}",
                f.bias
            );
        }
    }

    #[test]
    fn each_formats_half_step_is_half_its_smallest_subnormal() {
        for f in [E4M3, E5M2] {
            assert_eq!(f.half_step(), 2f32.powi(-(f.bias + f.man as i32)));
            assert_eq!(decode(1, f), 2.0 * f.half_step());
        }
    }

    #[test]
    fn scales_are_each_groups_largest_finite_magnitude() {
        // 259 columns (a last block 3 wide, rows not a multiple of the eight lanes), with the
        // largest magnitudes, NaN and infinities planted where the lanes' tails and the blocks'
        // edges fall; against one element at a time.
        let (rows, cols) = (130usize, 259usize);
        let mut x: Vec<f32> = (0..rows * cols).map(|i| ((i * 2_654_435_761) % 1000) as f32 * 0.01 - 5.0).collect();
        for (i, v) in [(258, -900.0), (128 * cols + 257, 77.0), (3, f32::NAN), (5 * cols + 200, f32::INFINITY)] {
            x[i] = v;
        }
        x[129 * cols..130 * cols].fill(f32::NEG_INFINITY); // a row with nothing finite
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let shape = [rows as u64, cols as u64];
        let local = Local { bytes: &bytes, dtype: "f32", shape: &shape, origin: &[256, 0] };
        let want = |scale: Scale| {
            let group = |r: usize, c: usize| if scale == Scale::Block { (r / 128) * 3 + c / 128 } else { 0 };
            let mut amax = vec![0f32; if scale == Scale::Block { 6 } else { 1 }];
            for (i, v) in x.iter().enumerate() {
                let g = group(i / cols, i % cols);
                if v.is_finite() && v.abs() > amax[g] {
                    amax[g] = v.abs();
                }
            }
            amax.into_iter().map(|a| scale_for(a, E4M3)).collect::<Vec<f32>>()
        };
        for scale in [Scale::Tensor, Scale::Block] {
            assert_eq!(scales(&local, scale, E4M3).unwrap(), want(scale), "{scale:?}");
        }
        assert_eq!(scales(&local, Scale::Block, E4M3).unwrap()[2], 900.0 / 448.0);
        assert_eq!(scales(&local, Scale::Block, E4M3).unwrap()[5], 77.0 / 448.0);
    }

    #[test]
    fn encodes_round_trip_every_code() {
        for f in [E4M3, E5M2] {
            for b in 0..=255u8 {
                let v = decode(b, f);
                if v.is_nan() {
                    continue;
                }
                if v.is_infinite() {
                    assert_eq!(encode(v, f), if v > 0.0 { 0x7b } else { 0xfb }, "infinity saturates");
                    continue;
                }
                assert_eq!(encode(v, f), b, "{b:#x} = {v}");
            }
        }
    }

    #[test]
    fn ties_go_to_even_and_overflow_saturates() {
        assert_eq!(encode(1.0625, E4M3), 0x38); // between 1.0 and 1.125: to 1.0 (even)
        assert_eq!(encode(1.1875, E4M3), 0x3a); // between 1.125 and 1.25: to 1.25 (even)
        assert_eq!(encode(2f32.powi(-10), E4M3), 0); // half the smallest subnormal: to 0
        assert_eq!(encode(3.0 * 2f32.powi(-10), E4M3), 2); // between 2^-9 and 2^-8: to 2^-8
        assert_eq!(encode(1e9, E4M3), 0x7e);
        assert_eq!(encode(-f32::INFINITY, E5M2), 0xfb);
        assert_eq!(encode(-f32::NAN, E4M3), 0xff);
        assert_eq!(encode(f32::NAN, E5M2), 0x7e);
    }
}
