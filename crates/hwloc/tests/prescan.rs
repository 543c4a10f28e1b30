//! The nesting pre-scan (issue 37's audit): markup that hides an element's opening from a naive
//! scan (`/>` or `>` inside an attribute value, closing tags inside comments or CDATA, entities
//! that expand to elements) must not let a deep file reach the recursive XML parser, whose
//! stack it would overflow (SIGABRT, no error). Each case is refused with a clear error.

use accel_hwloc::{import, ImportError};

fn wrap(body: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\" \
         cpuset=\"0x00000003\" nodeset=\"0x00000001\">\n{body}\n</object>\n</topology>\n"
    )
    .into_bytes()
}

fn refused_as_too_deep(xml: &[u8], what: &str) {
    match import(xml) {
        Err(ImportError::NotHwloc(m)) => assert!(m.contains("nest") || m.contains("entit"), "{what}: {m}"),
        other => panic!("{what}: {other:?}"),
    }
}

const DEPTH: usize = 200_000;

#[test]
fn a_self_closing_look_inside_an_attribute_value_is_not_self_closing() {
    let body = format!("{}{}", "<object type=\"Group\" name=\"/>\">".repeat(DEPTH), "</object>".repeat(DEPTH));
    refused_as_too_deep(&wrap(&body), "`/>` in a double-quoted value");
    let body = format!("{}{}", "<object type='Group' name='a/>'>".repeat(DEPTH), "</object>".repeat(DEPTH));
    refused_as_too_deep(&wrap(&body), "`/>` in a single-quoted value");
}

#[test]
fn closing_tags_inside_comments_and_cdata_do_not_count() {
    let hide = "<!-- </object></object></object></object> -->";
    let body = format!("{}{}", format!("<object type=\"Group\">{hide}").repeat(DEPTH), "</object>".repeat(DEPTH));
    refused_as_too_deep(&wrap(&body), "closing tags in comments");
    let hide = "<![CDATA[ </object></object></object> ]]>";
    let body = format!("{}{}", format!("<object type=\"Group\">{hide}").repeat(DEPTH), "</object>".repeat(DEPTH));
    refused_as_too_deep(&wrap(&body), "closing tags in CDATA");
}

#[test]
fn entities_that_hold_markup_are_refused() {
    let mut dtd = String::from("<!DOCTYPE topology [\n<!ENTITY e0 \"<object type='Group'>x</object>\">\n");
    for i in 1..10 {
        let inner = format!("<object type='Group'>&e{};</object>", i - 1).repeat(1);
        let nested = format!("{}{}{}", "<object type='Group'>".repeat(400), inner, "</object>".repeat(400));
        dtd.push_str(&format!("<!ENTITY e{i} \"{nested}\">\n"));
    }
    dtd.push_str("]>\n");
    let xml = String::from_utf8(wrap("&e9;")).unwrap().replacen("<topology", &format!("{dtd}<topology"), 1);
    refused_as_too_deep(xml.as_bytes(), "nested entities");
}

#[test]
fn shallow_files_with_such_markup_still_import() {
    let body = "<!-- a comment with </object> and <object> --><object type=\"Group\" name=\"a/>b\"/>";
    let topo = import(&wrap(body)).expect("a shallow file imports");
    assert!(topo.warnings.iter().all(|w| !w.contains("nest")), "{:?}", topo.warnings);
}
