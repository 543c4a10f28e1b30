//! The plugin protocol's JSON Schemas (docs/plugin-protocol/*.schema.json), embedded, and a
//! small validator for the subset they use: `type`, `required`, `properties`,
//! `additionalProperties`, `items`, `enum`, `const`, `minimum`, `maximum`. `pattern` is not
//! checked here (the Python test suite validates the same documents with `jsonschema`).

use serde_json::Value;

/// Every message's schema, by name (`discover.response`, ...).
pub const SCHEMAS: &[(&str, &str)] = &[
    ("version.response", include_str!("../../../docs/plugin-protocol/version.response.schema.json")),
    ("discover.request", include_str!("../../../docs/plugin-protocol/discover.request.schema.json")),
    ("discover.response", include_str!("../../../docs/plugin-protocol/discover.response.schema.json")),
    ("isolate.request", include_str!("../../../docs/plugin-protocol/isolate.request.schema.json")),
    ("isolate.response", include_str!("../../../docs/plugin-protocol/isolate.response.schema.json")),
    ("metrics.response", include_str!("../../../docs/plugin-protocol/metrics.response.schema.json")),
    ("health.response", include_str!("../../../docs/plugin-protocol/health.response.schema.json")),
];

/// Validates `value` against the named schema; each error names the JSON path.
pub fn validate(name: &str, value: &Value) -> Vec<String> {
    let Some((_, text)) = SCHEMAS.iter().find(|(n, _)| *n == name) else {
        return vec![format!("no schema named {name}")];
    };
    let schema: Value = serde_json::from_str(text).expect("embedded schemas are valid JSON (tested)");
    let mut errors = Vec::new();
    check(&schema, value, "$", &mut errors);
    errors
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        _ => true,
    }
}

fn check(schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    if errors.len() > 20 {
        return;
    }
    if let Some(ty) = schema.get("type") {
        let ok = match ty {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)),
            _ => true,
        };
        if !ok {
            errors.push(format!("{at}: expected {ty}, got {}", short(v)));
            return;
        }
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            errors.push(format!("{at}: expected {c}, got {}", short(v)));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(v) {
            errors.push(format!("{at}: {} is not one of {}", short(v), Value::Array(options.clone())));
        }
    }
    if let (Some(min), Some(x)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errors.push(format!("{at}: {x} is below {min}"));
        }
    }
    if let (Some(max), Some(x)) = (schema.get("maximum").and_then(Value::as_f64), v.as_f64()) {
        if x > max {
            errors.push(format!("{at}: {x} is above {max}"));
        }
    }
    if let Value::Object(obj) = v {
        for key in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !obj.contains_key(key) {
                errors.push(format!("{at}: missing required field {key:?}"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (key, child) in obj {
            match props.and_then(|p| p.get(key)) {
                Some(s) => check(s, child, &format!("{at}.{key}"), errors),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => errors.push(format!("{at}: unexpected field {key:?}")),
                    Some(s @ Value::Object(_)) => check(s, child, &format!("{at}.{key}"), errors),
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(items), Some(s)) = (v, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            check(s, item, &format!("{at}[{i}]"), errors);
        }
    }
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 60 {
        format!("{}...", &text[..text.char_indices().nth(57).map_or(text.len(), |(i, _)| i)])
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_parse_and_check() {
        for (name, text) in SCHEMAS {
            let s: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s["type"], "object", "{name}");
        }
        let ok = serde_json::json!({"protocol": 1, "devices": [{"pci": "0000:3b:00.0", "healthy": true}]});
        assert!(validate("health.response", &ok).is_empty());
        let bad = serde_json::json!({"protocol": 2, "devices": [{"healthy": "yes"}]});
        let errors = validate("health.response", &bad);
        assert_eq!(errors.len(), 3, "{errors:?}");
        let metrics =
            serde_json::json!({"protocol": 1, "devices": [{"pci": "x", "utilization_ratio": 1.5, "extra": 1}]});
        assert_eq!(validate("metrics.response", &metrics).len(), 1, "unknown fields are ignored, ranges are not");
    }
}
