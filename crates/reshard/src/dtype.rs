//! The element types a layout may name: their sizes, which pairs a destination converts
//! between (floating types among themselves; anything to itself), and which are quantised at
//! the source (FP8, with a scale per tensor or per 128x128 block).

/// Every dtype name a layout accepts: (name, bytes per element, floating point).
pub const DTYPES: &[(&str, u64, bool)] = &[
    ("f64", 8, true),
    ("f32", 4, true),
    ("f16", 2, true),
    ("bf16", 2, true),
    ("i64", 8, false),
    ("i32", 4, false),
    ("i16", 2, false),
    ("i8", 1, false),
    ("u8", 1, false),
    ("bool", 1, false),
    ("f8e4m3", 1, true),
    ("f8e5m2", 1, true),
];

fn find(name: &str) -> Option<&'static (&'static str, u64, bool)> {
    DTYPES.iter().find(|(n, _, _)| *n == name)
}

/// Bytes per element of `name`, or `None` for a name not in [`DTYPES`].
pub fn itemsize(name: &str) -> Option<u64> {
    find(name).map(|d| d.1)
}

/// The table's own copy of `name` (`None` for an unknown name).
pub fn canonical(name: &str) -> Option<&'static str> {
    find(name).map(|d| d.0)
}

/// Whether `name` is an FP8 type (stored with scales; made from wider floats at the source).
pub fn is_fp8(name: &str) -> bool {
    name.starts_with("f8")
}

/// Whether a destination can hold elements of `from` as `to`: the same type, floats among
/// themselves, or a wider float quantised to FP8 (never FP8 to anything else: its scales
/// would be lost).
pub fn convertible(from: &str, to: &str) -> bool {
    from == to || (!is_fp8(from) && matches!((find(from), find(to)), (Some((_, _, true)), Some((_, _, true)))))
}

/// The type a piece travels in: FP8 destinations are quantised at the source (half the bytes
/// of bf16 on every link), every other conversion happens at the destination.
pub fn wire<'a>(src: &'a str, dst: &'a str) -> &'a str {
    if is_fp8(dst) {
        dst
    } else {
        src
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_convert_among_themselves_only() {
        assert!(convertible("bf16", "f16"));
        assert!(convertible("i8", "i8"));
        assert!(!convertible("i8", "f16"));
        assert!(!convertible("f32", "nope"));
        assert!(convertible("bf16", "f8e4m3"));
        assert!(!convertible("f8e4m3", "bf16"));
        assert!(!convertible("f8e4m3", "f8e5m2"));
        assert!(!convertible("i8", "f8e5m2"));
        assert_eq!(itemsize("bf16"), Some(2));
        assert_eq!(itemsize("f8"), None);
        assert_eq!((wire("bf16", "f8e4m3"), wire("bf16", "f16")), ("f8e4m3", "bf16"));
    }
}
