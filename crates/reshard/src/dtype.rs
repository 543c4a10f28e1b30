//! The element types a layout may name: their sizes, and which pairs a destination converts
//! between (floating types among themselves; anything to itself).

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
];

fn find(name: &str) -> Option<&'static (&'static str, u64, bool)> {
    DTYPES.iter().find(|(n, _, _)| *n == name)
}

/// Bytes per element of `name`, or `None` for a name not in [`DTYPES`].
pub fn itemsize(name: &str) -> Option<u64> {
    find(name).map(|d| d.1)
}

/// Whether a destination can turn elements of `from` into `to`.
pub fn convertible(from: &str, to: &str) -> bool {
    from == to || matches!((find(from), find(to)), (Some((_, _, true)), Some((_, _, true))))
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
        assert_eq!(itemsize("bf16"), Some(2));
        assert_eq!(itemsize("f8"), None);
    }
}
