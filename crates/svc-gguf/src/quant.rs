//! Half floats and the Q4_1, Q8_0 and Q4_0 blocks, computed exactly as
//! ggml's reference code does (`quantize_row_*_ref`, `dequantize_row_*`),
//! so converted files hold the bytes llama.cpp's own quantizer would write.

/// Values per block of Q4_0, Q4_1 and Q8_0.
pub const QK: usize = 32;
/// Bytes per Q4_1 block: f16 scale, f16 minimum, 16 bytes of 4-bit quants.
pub const Q4_1_BLOCK: usize = 20;
/// Bytes per Q8_0 block: f16 scale, 32 signed bytes.
pub const Q8_0_BLOCK: usize = 34;
/// Bytes per Q4_0 block: f16 scale, 16 bytes of 4-bit quants.
pub const Q4_0_BLOCK: usize = 18;

fn half_at(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// ggml's `dequantize_row_q4_1` for one block: x = d * q + m.
pub fn dequantize_q4_1(block: &[u8], out: &mut [f32; QK]) {
    let d = half_at(block, 0);
    let m = half_at(block, 2);
    for (j, &byte) in block[4..4 + QK / 2].iter().enumerate() {
        out[j] = f32::from(byte & 0x0F) * d + m;
        out[j + QK / 2] = f32::from(byte >> 4) * d + m;
    }
}

/// ggml's `quantize_row_q8_0_ref` for one block: d = max|x| / 127, q = round(x / d).
pub fn quantize_q8_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    // |x * id| <= 127 (up to rounding), so the cast does not saturate in practice.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// ggml's `dequantize_row_q8_0` for one block.
pub fn dequantize_q8_0(block: &[u8], out: &mut [f32; QK]) {
    let d = half_at(block, 0);
    for (y, &q) in out.iter_mut().zip(&block[2..2 + QK]) {
        *y = f32::from(q as i8) * d;
    }
}

/// ggml's `quantize_row_q4_0_ref` for one block: d = (the value of largest magnitude) / -8.
pub fn quantize_q4_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..QK / 2 {
        out.push(q(x[j]) | (q(x[j + QK / 2]) << 4));
    }
}

/// ggml's `dequantize_row_q4_0` for one block.
pub fn dequantize_q4_0(block: &[u8], out: &mut [f32; QK]) {
    let d = half_at(block, 0);
    for (j, &byte) in block[2..2 + QK / 2].iter().enumerate() {
        out[j] = (f32::from(byte & 0x0F) - 8.0) * d;
        out[j + QK / 2] = (f32::from(byte >> 4) - 8.0) * d;
    }
}

/// IEEE half precision to single (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x3FF);
    let sign = u32::from(negative) << 31;
    match exp {
        0 => {
            // Zero or subnormal: man * 2^-24.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            if negative { -v } else { v }
        }
        0x1F => f32::from_bits(sign | 0x7F80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Single precision to IEEE half, rounding to nearest, ties to even (as F16C does).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32;
    let man = bits & 0x7F_FFFF;
    if exp == 0xFF {
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7C00 | nan;
    }
    let e = exp - 127 + 15;
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    if e <= 0 {
        // A subnormal half (or zero): the value is m * 2^-24.
        let shift = (14 - e) as u32;
        if shift > 24 || exp == 0 {
            return sign;
        }
        let m = man | 0x80_0000;
        let q = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let up = rem > halfway || (rem == halfway && q & 1 == 1);
        return sign | (q + u32::from(up)) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1FFF;
    let up = rem > 0x1000 || (rem == 0x1000 && half & 1 == 1);
    // A carry out of the mantissa moves to the next exponent, and past the
    // largest finite value to infinity, as it should.
    sign | (half + u32::from(up)) as u16
}

/// ggml's `quantize_row_q4_1_ref` for one block: d = (max - min) / 15, m = min.
pub fn quantize_q4_1(x: &[f32; QK], out: &mut Vec<u8>) {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    out.extend_from_slice(&f32_to_f16(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    for j in 0..QK / 2 {
        out.push(q(x[j]) | (q(x[j + QK / 2]) << 4));
    }
}

/// `values` (a multiple of 32 of them) as Q4_1 blocks; a last partial block is dropped.
pub fn quantize_row_q4_1(values: &[f32]) -> Vec<u8> {
    debug_assert_eq!(values.len() % QK, 0);
    let mut out = Vec::with_capacity(values.len() / QK * Q4_1_BLOCK);
    for block in values.chunks_exact(QK) {
        let mut x = [0f32; QK];
        x.copy_from_slice(block);
        quantize_q4_1(&x, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn half_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                assert!(f32_to_f16(x) & 0x7C00 == 0x7C00 && f32_to_f16(x) & 0x3FF != 0);
                continue;
            }
            assert_eq!(f32_to_f16(x), h, "{h:#06x} -> {x}");
        }
    }

    #[test]
    fn half_rounds_to_nearest_even() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7BFF), 65504.0);
        for h in 0..0x7BFFu16 {
            let (a, b) = (f16_to_f32(h), f16_to_f32(h + 1));
            let mid = (a + b) / 2.0; // exact: halves need 11 bits
            let even = if h % 2 == 0 { h } else { h + 1 };
            assert_eq!(f32_to_f16(mid), even, "{h:#06x}");
            assert_eq!(f32_to_f16(mid.next_down()), h, "{h:#06x}");
            assert_eq!(f32_to_f16(mid.next_up()), h + 1, "{h:#06x}");
            assert_eq!(f32_to_f16(-mid.next_up()), (h + 1) | 0x8000);
        }
        assert_eq!(f32_to_f16(65520.0), 0x7C00); // rounds past the largest half
        assert_eq!(f32_to_f16(1e-9), 0);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7C00);
    }

    #[test]
    fn q8_0_matches_ggml_reference_on_a_known_block() {
        let mut x = [0f32; QK];
        for (i, v) in x.iter_mut().enumerate() {
            *v = i as f32 - 10.0;
        }
        let mut out = Vec::new();
        quantize_q8_0(&x, &mut out);
        // amax 21, d = 21/127; 21 -> 127, -10 -> round(-60.476) = -60.
        assert_eq!(out[2 + 31] as i8, 127);
        assert_eq!(out[2] as i8, -60);
        assert_eq!(out[2 + 10] as i8, 0);
        let mut y = [0f32; QK];
        dequantize_q8_0(&out, &mut y);
        assert!((y[31] - 21.0).abs() < 0.02);

        let mut out = Vec::new();
        quantize_q4_0(&x, &mut out);
        // The largest magnitude is 21 (positive): d = -21/8, so 21 -> 0 and -10 -> 12.
        assert_eq!(out[2 + 15] >> 4, 0);
        assert_eq!(out[2] & 0xF, 12);
    }
}
