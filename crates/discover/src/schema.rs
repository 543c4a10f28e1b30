//! The plugin protocol's JSON Schemas (docs/plugin-protocol/*.schema.json), embedded, and a
//! small validator for the subset they use: `type`, `required`, `properties`,
//! `additionalProperties`, `items`, `enum`, `const`, `minimum`, `maximum`. `pattern` is not
//! checked by [`validate`] (the Python test suite validates the same documents with
//! `jsonschema`).
//!
//! [`Validator`] is the same walk for OpenAPI v3 structural schemas (Kubernetes CRDs' and the
//! API server's): `$ref` into a definitions map, `allOf`/`oneOf`/`anyOf`, `minItems`/`maxItems`,
//! `minLength`/`maxLength`, `pattern` through a matcher the caller gives (no regex engine here),
//! a strict mode where a field the schema does not name is an error (the API server's
//! `fieldValidation=Strict`), and the `x-kubernetes-validations` (CEL) rules it met, returned
//! for the caller to check, since no CEL evaluator lives here.

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

/// A `pattern` matcher: `matches(pattern, text)`.
pub type PatternFn<'a> = &'a dyn Fn(&str, &str) -> bool;

/// An OpenAPI v3 structural-schema validator (module doc).
pub struct Validator<'a> {
    /// Definitions a `$ref` names by its last `/` segment (`#/$defs/X`,
    /// `/api/_definitions.json#/$defs/X`, `#/components/schemas/X` all look up `X`).
    pub defs: Option<&'a serde_json::Map<String, Value>>,
    /// A field the schema does not name (and no `additionalProperties` allows) is an error.
    pub strict: bool,
    /// `pattern`: `Some(matches(pattern, text))`; `None` leaves patterns unchecked.
    pub pattern: Option<PatternFn<'a>>,
}

impl std::fmt::Debug for Validator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator")
            .field("defs", &self.defs.map(|d| d.len()))
            .field("strict", &self.strict)
            .field("pattern", &self.pattern.is_some())
            .finish()
    }
}

/// What [`Validator::check`] found.
#[derive(Debug, Default)]
pub struct Findings {
    pub errors: Vec<String>,
    /// `(JSON path, message, rule)` of every `x-kubernetes-validations` rule on the way.
    pub cel_rules: Vec<(String, String, String)>,
}

impl Validator<'_> {
    /// Validates `value` against `schema`.
    pub fn check(&self, schema: &Value, value: &Value) -> Findings {
        let mut out = Findings::default();
        self.walk(schema, value, "$", &mut out, 0);
        out
    }

    fn resolve<'s>(&'s self, schema: &'s Value) -> Result<&'s Value, String> {
        match schema.get("$ref").and_then(Value::as_str) {
            None => Ok(schema),
            Some(r) => {
                let name = r.rsplit('/').next().unwrap_or(r);
                self.defs.and_then(|d| d.get(name)).ok_or_else(|| format!("unresolved $ref {r}"))
            }
        }
    }

    fn walk(&self, schema: &Value, v: &Value, at: &str, out: &mut Findings, depth: u32) {
        if depth > 64 || out.errors.len() > 50 {
            return;
        }
        let schema = match self.resolve(schema) {
            Ok(s) => s,
            Err(e) => return out.errors.push(format!("{at}: {e}")),
        };
        if schema.get("$ref").is_some() {
            return self.walk(schema, v, at, out, depth + 1);
        }
        for s in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.walk(s, v, at, out, depth + 1);
        }
        for (key, exactly_one) in [("oneOf", true), ("anyOf", false)] {
            if let Some(options) = schema.get(key).and_then(Value::as_array) {
                let ok = options
                    .iter()
                    .filter(|s| {
                        let mut trial = Findings::default();
                        self.walk(s, v, at, &mut trial, depth + 1);
                        trial.errors.is_empty()
                    })
                    .count();
                if ok == 0 || (exactly_one && ok > 1) {
                    out.errors.push(format!("{at}: {} matches {ok} of the {key} schemas", short(v)));
                }
            }
        }
        for rule in schema.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
            let text = |k: &str| rule.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            out.cel_rules.push((at.to_owned(), text("message"), text("rule")));
        }
        let mut basic = Vec::new();
        let mut plain = schema.clone();
        if let Some(obj) = plain.as_object_mut() {
            // Properties, items and additionalProperties are walked here, with $ref resolution.
            for k in ["properties", "items", "additionalProperties", "required"] {
                obj.remove(k);
            }
        }
        check(&plain, v, at, &mut basic);
        out.errors.extend(basic);
        if let Some(t) = v.as_str() {
            let len = t.chars().count() as u64;
            if schema.get("minLength").and_then(Value::as_u64).is_some_and(|m| len < m) {
                out.errors.push(format!("{at}: {} is shorter than {}", short(v), schema["minLength"]));
            }
            if schema.get("maxLength").and_then(Value::as_u64).is_some_and(|m| len > m) {
                out.errors.push(format!("{at}: {} is longer than {}", short(v), schema["maxLength"]));
            }
            if let (Some(p), Some(matches)) = (schema.get("pattern").and_then(Value::as_str), self.pattern) {
                if !matches(p, t) {
                    out.errors.push(format!("{at}: {} does not match {p}", short(v)));
                }
            }
        }
        match v {
            Value::Array(items) => {
                let n = items.len() as u64;
                if schema.get("minItems").and_then(Value::as_u64).is_some_and(|m| n < m) {
                    out.errors.push(format!("{at}: {n} items, fewer than {}", schema["minItems"]));
                }
                if schema.get("maxItems").and_then(Value::as_u64).is_some_and(|m| n > m) {
                    out.errors.push(format!("{at}: {n} items, more than {}", schema["maxItems"]));
                }
                if let Some(s) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.walk(s, item, &format!("{at}[{i}]"), out, depth + 1);
                    }
                }
            }
            Value::Object(obj) => {
                for key in
                    schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
                {
                    if !obj.contains_key(key) {
                        out.errors.push(format!("{at}: missing required field {key:?}"));
                    }
                }
                let props = schema.get("properties").and_then(Value::as_object);
                let open = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
                for (key, child) in obj {
                    let path = format!("{at}.{key}");
                    match (props.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                        (Some(s), _) => self.walk(s, child, &path, out, depth + 1),
                        (None, Some(Value::Bool(false))) => out.errors.push(format!("{at}: unexpected field {key:?}")),
                        (None, Some(s @ Value::Object(_))) => self.walk(s, child, &path, out, depth + 1),
                        (None, _) if self.strict && !open && props.is_some() => {
                            out.errors.push(format!("{at}: unknown field {key:?}"));
                        }
                        (None, _) => {}
                    }
                }
            }
            _ => {}
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
    fn structural_schemas_follow_refs_and_limits_and_fail_on_broken_input() {
        let defs = serde_json::json!({
            "Level": {"type": "object", "required": ["nodeLabel"], "properties": {"nodeLabel": {"type": ["string", "null"], "minLength": 1, "maxLength": 8, "pattern": "^[a-z/]+$"}}},
            "Q": {"oneOf": [{"type": ["string", "null"]}, {"type": ["number", "null"]}]}
        });
        let schema = serde_json::json!({"type": "object", "properties": {
            "levels": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"$ref": "/api/_definitions.json#/$defs/Level"},
                       "x-kubernetes-validations": [{"message": "must be unique", "rule": "size(self) > 0"}]},
            "q": {"allOf": [{"$ref": "#/$defs/Q"}]}}});
        let matches = |p: &str, t: &str| p == "^[a-z/]+$" && t.chars().all(|c| c.is_ascii_lowercase() || c == '/');
        let v = Validator { defs: defs.as_object(), strict: true, pattern: Some(&matches) };
        let good = serde_json::json!({"levels": [{"nodeLabel": "a/b"}], "q": "80Gi"});
        let f = v.check(&schema, &good);
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        assert_eq!(f.cel_rules, [("$.levels".to_owned(), "must be unique".to_owned(), "size(self) > 0".to_owned())]);
        let bad = serde_json::json!({"levels": [{"nodeLabel": "A"}, {"nodeLabel": ""}, {}], "q": true, "extra": 1});
        let errors = v.check(&schema, &bad).errors;
        for part in [
            "more than 2",
            "does not match",
            "shorter than 1",
            "missing required field \"nodeLabel\"",
            "matches 0 of the oneOf",
            "unknown field \"extra\"",
        ] {
            assert!(errors.iter().any(|e| e.contains(part)), "{part}: {errors:?}");
        }
        assert!(v.check(&serde_json::json!({"$ref": "#/$defs/Nope"}), &good).errors[0].contains("unresolved"));
    }

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
