//! Bad input to the importer: not XML, truncated, the wrong document, an unsupported version,
//! and hostile files (huge ids and counts, deep nesting, path traversal and control characters
//! in names). Each gives a clear error or a warning, never a panic or a hang; and random bytes
//! or a real XML cut or corrupted anywhere never panic.

use accel_hwloc::{import, ImportError};
use proptest::prelude::*;

fn real() -> Vec<u8> {
    std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../test_data/hwloc-xml/24em64t-2n6c2t-pci.xml")).unwrap()
}

fn wrap(body: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\" \
         cpuset=\"0x00000003\" nodeset=\"0x00000001\">\n<object type=\"NUMANode\" os_index=\"0\" \
         cpuset=\"0x00000003\" nodeset=\"0x00000001\" local_memory=\"1048576\"/>\n\
         <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\"/>\n<object type=\"PU\" os_index=\"1\" \
         cpuset=\"0x00000002\"/>\n{body}\n</object>\n</topology>\n"
    )
    .into_bytes()
}

#[test]
fn clear_errors() {
    assert!(matches!(import(b"not xml at all"), Err(ImportError::NotXml(_))));
    let xml = real();
    assert!(matches!(import(&xml[..xml.len() / 2]), Err(ImportError::NotXml(_))), "truncated");
    assert!(matches!(import(b"<svg version=\"2.0\"/>"), Err(ImportError::NotHwloc(_))));
    assert!(matches!(import(b"<topology version=\"2.0\"></topology>"), Err(ImportError::NotHwloc(_))));
    let v1 = import(b"<topology><object type=\"Machine\"/></topology>").unwrap_err();
    assert!(matches!(v1, ImportError::Version(_)));
    assert!(v1.to_string().contains("hwloc 2"), "{v1}");
    assert!(matches!(import(&[0xff, 0xfe, 0x00]), Err(ImportError::NotXml(_))));
    // A billion laughs is refused by the parser's entity limits, not expanded.
    let laughs =
        "<?xml version=\"1.0\"?><!DOCTYPE t [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">\
                  <!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\"><!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">\
                  <!ENTITY e \"&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;\"><!ENTITY f \"&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;\">\
                  <!ENTITY g \"&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;\">]><topology version=\"2.0\"><object type=\"Machine\">\
                  <info name=\"x\" value=\"&g;\"/></object></topology>";
    match import(laughs.as_bytes()) {
        Err(_) => {}
        Ok(i) => assert!(i.tree.to_bundle().len() < 1 << 20, "expanded"),
    }
}

#[test]
fn hostile_names_and_counts_are_warnings() {
    let body = r#"<object type="Bridge" bridge_type="0-1" bridge_pci="0000:[00-0f]">
<object type="PCIDev" pci_busid="0000:01:00.0" pci_type="0200 [15b3:1017] [15b3:0007] 00">
  <object type="OSDev" name="../../../etc/passwd" osdev_type="2"/>
  <object type="OSDev" name="eth 0" osdev_type="2"/>
  <object type="OSDev" name="ib&#10;0" osdev_type="3"/>
  <object type="OSDev" name="ok0" osdev_type="2"><info name="Address" value="aa&#127;&#9;x"/></object>
  <object type="OSDev" name="ok0" osdev_type="2"/>
</object>
<object type="PCIDev" pci_busid="../../x" pci_type="0200 [15b3:1017] [15b3:0007] 00"/>
<object type="PCIDev" pci_busid="0000:02:00.0" pci_type="garbage"/>
</object>
<object type="PU" os_index="4294967295" cpuset="0x1"/>
<object type="NUMANode" os_index="99999999999"/>
<object type="Group" cpuset="0xf...f"/>"#;
    let i = import(&wrap(body)).unwrap();
    let bundle = String::from_utf8(i.tree.to_bundle()).unwrap();
    // No path leaves its directory, and nothing but the one good netdev was written.
    let paths: Vec<&str> = i.tree.paths().map(|(p, _)| p.to_str().unwrap()).collect();
    assert!(paths.iter().all(|p| !p.contains("..") && !p.contains("passwd")), "a path climbs: {paths:?}");
    assert!(bundle.contains("L /sys/class/net/ok0 "));
    assert!(!bundle.contains("/sys/class/net/eth"));
    assert!(!bundle.contains("/sys/class/infiniband/"));
    assert!(!bundle.contains('\u{7f}') && !bundle.contains('\t'), "a control character reached a file");
    let warnings = i.warnings.join("\n");
    for needle in
        ["../../../etc/passwd", "eth 0", "named twice", "pci_busid", "pci_type", "PU without", "NUMANode without"]
    {
        assert!(warnings.contains(needle), "no warning for {needle}:\n{warnings}");
    }
    assert_eq!(i.summary.pci_functions, 1, "only the good function: {warnings}");
}

#[test]
fn huge_counts_and_depth_are_bounded() {
    // Deep nesting: 100000 nested Groups (an explicit stack: no recursion to overflow).
    let depth = 100_000;
    let body = format!("{}{}", "<object type=\"Group\">".repeat(depth), "</object>".repeat(depth));
    match import(&wrap(&body)) {
        Err(ImportError::NotHwloc(m)) => assert!(m.contains("nest"), "{m}"),
        other => panic!("deep nesting: {other:?}"),
    }
    // A bridge chain deeper than any machine.
    let mut chain = String::from("<object type=\"Bridge\" bridge_pci=\"0000:[00-ff]\">");
    for n in 0..40 {
        chain.push_str(&format!(
            "<object type=\"Bridge\" pci_busid=\"0000:{n:02x}:00.0\" pci_type=\"0604 [8086:0001] [0000:0000] 00\">"
        ));
    }
    chain.push_str(&"</object>".repeat(41));
    let i = import(&wrap(&chain)).unwrap();
    assert_eq!(i.summary.pci_functions, 32);
    assert!(i.warnings.iter().any(|w| w.contains("more than 32 bridges")));
    // A distance matrix claiming four billion nodes.
    let xml = String::from_utf8(wrap("")).unwrap().replace(
        "</topology>",
        "<distances2 type=\"NUMANode\" nbobjs=\"4294967295\" kind=\"5\" name=\"NUMALatency\" indexing=\"os\">\
         <indexes length=\"1\">0</indexes><u64values length=\"1\">10</u64values></distances2></topology>",
    );
    let i = import(xml.as_bytes()).unwrap();
    assert!(i.warnings.iter().any(|w| w.contains("distances")), "{:?}", i.warnings);
    // Too large a file is refused before parsing.
    let big = vec![b' '; accel_hwloc::MAX_XML_BYTES + 1];
    assert!(matches!(import(&big), Err(ImportError::TooLarge(_))));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = import(&bytes);
    }

    #[test]
    fn a_real_xml_cut_or_corrupted_never_panics(cut in 0usize..21651, at in 0usize..21651, byte in any::<u8>()) {
        let mut xml = real();
        let at = at % xml.len();
        xml[at] = byte;
        xml.truncate(cut.max(1));
        let _ = import(&xml);
    }
}
