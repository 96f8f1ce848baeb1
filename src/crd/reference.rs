//! The manual's field reference (`docs/src/reference/crd.md`), generated from the CRD's own
//! OpenAPI schema: every field of `spec` and `status` with its type, default, bounds, allowed
//! values, CEL rules and doc comment, so that the page cannot drift from what the API server
//! enforces and `kubectl explain` shows. Checked and rewritten by [`super::drift_check`].

use serde_json::Value;

use super::RemediationPolicy;
use kube::CustomResourceExt;

/// The reference page for the CRD as [`RemediationPolicy::crd`] generates it.
pub fn crd_reference_markdown() -> String {
    let crd = serde_json::to_value(RemediationPolicy::crd()).unwrap_or_default();
    let spec = &crd["spec"];
    let version = &spec["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut out = String::new();
    out.push_str("# RemediationPolicy fields\n\n");
    out.push_str(
        "<!-- Generated from the CRD (src/crd/) by \
         `UPDATE_GENERATED=1 cargo test --lib crd::drift_check`: do not edit by hand. -->\n\n",
    );
    out.push_str(&format!(
        "`{}` (group `{}`, version `{}`, {} scope, short name {}): every field, as the API server \
         validates it and `kubectl explain` shows it. What the fields make the operator do, with \
         examples: [Policies, field by field](../user-guide/policies.md).\n\n",
        text(&crd["metadata"]["name"]),
        text(&spec["group"]),
        text(&version["name"]),
        text(&spec["scope"]).to_lowercase(),
        list(&spec["names"]["shortNames"]),
    ));
    out.push_str(&format!("{}\n\n", paragraph(&schema["description"])));
    out.push_str(
        "## Columns of `kubectl get`\n\n| column | JSON path | type |\n| --- | --- | --- |\n",
    );
    for column in version["additionalPrinterColumns"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            text(&column["name"]),
            text(&column["jsonPath"]),
            text(&column["type"])
        ));
    }
    for part in ["spec", "status"] {
        out.push_str(&format!("\n## `{part}`\n\n"));
        let field = &schema["properties"][part];
        out.push_str(&facts(field, false));
        fields(&mut out, part, field);
    }
    out
}

/// One section per field under `schema`, depth first, in the schema's (alphabetical) order.
fn fields(out: &mut String, path: &str, schema: &Value) {
    let (path, schema) = match schema.get("items") {
        Some(items) => (format!("{path}[]"), items),
        None => (path.to_string(), schema),
    };
    let Some(properties) = schema["properties"].as_object() else { return };
    let required = strings(&schema["required"]);
    for (name, field) in properties {
        let path = format!("{path}.{name}");
        out.push_str(&format!("\n### `{path}`\n\n"));
        out.push_str(&facts(field, required.contains(name)));
        fields(out, &path, field);
    }
}

/// A field's type, constraints and description.
fn facts(field: &Value, required: bool) -> String {
    let mut facts = vec![format!("**Type**: {}", type_of(field))];
    if required {
        facts.push("**required**".to_string());
    }
    if field["nullable"] == true {
        facts.push("may be null".to_string());
    }
    if let Some(default) = field.get("default") {
        facts.push(format!("**default**: `{}`", compact(default)));
    }
    if let Some(values) = field["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", text(v))).collect();
        facts.push(format!("**one of**: {}", values.join(", ")));
    }
    for (key, shown) in [
        ("minimum", "minimum"),
        ("maxLength", "at most characters"),
        ("minItems", "at least items"),
        ("maxItems", "at most items"),
    ] {
        if let Some(value) = field.get(key) {
            facts.push(format!("**{shown}**: {}", compact(value)));
        }
    }
    if let Some(pattern) = field["pattern"].as_str() {
        facts.push(format!("**pattern**: `{pattern}`"));
    }
    if let Some(keys) = field.get("x-kubernetes-list-map-keys") {
        facts.push(format!("**list keyed by**: {}", list(keys)));
    }
    let mut out = format!("{}.\n\n", facts.join("; "));
    if field.get("description").is_some() {
        out.push_str(&format!("{}\n\n", paragraph(&field["description"])));
    }
    for rule in field["x-kubernetes-validations"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "- Rule `{}`: refused with \"{}\".\n",
            text(&rule["rule"]),
            text(&rule["message"])
        ));
    }
    if field.get("x-kubernetes-validations").is_some() {
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

fn type_of(field: &Value) -> String {
    if field["x-kubernetes-int-or-string"] == true {
        return "integer or string".to_string();
    }
    let kind = text(&field["type"]);
    let kind = match field["format"].as_str() {
        Some(format) => format!("{kind} ({format})"),
        None => kind,
    };
    match (field.get("items"), field.get("additionalProperties")) {
        (Some(items), _) => format!("array of {}", type_of(items)),
        (None, Some(values)) => format!("map of string to {}", type_of(values)),
        _ if kind.is_empty() => "any".to_string(),
        _ => kind,
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().map(text).collect()
}

fn list(value: &Value) -> String {
    strings(value).iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A doc comment as Markdown: its line breaks are the source's wrapping, except before a list
/// item or a blank line.
fn paragraph(value: &Value) -> String {
    let mut out = String::new();
    for line in text(value).lines().map(str::trim) {
        let breaks = line.is_empty() || line.starts_with("- ") || out.ends_with('\n');
        if !out.is_empty() {
            out.push(if breaks { '\n' } else { ' ' });
        }
        out.push_str(line);
        if line.is_empty() {
            out.push('\n');
        }
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_field_has_a_section_with_its_type() {
        let page = crd_reference_markdown();
        for (heading, fact) in [
            ("### `spec.mode`", "**one of**: `DryRun`, `Enforce`"),
            ("### `spec.deadNode.leaseStaleFor`", "**default**: `\"2m\"`"),
            ("### `spec.safety.maxUnhealthyNodes`", "**Type**: integer or string"),
            ("### `status.conditions[].type`", "**required**"),
        ] {
            let at = page.find(heading).unwrap_or_else(|| panic!("no {heading} in:\n{page}"));
            let section = &page[at..];
            let end = section[heading.len()..].find("\n### ").map_or(section.len(), |e| e + 4);
            assert!(section[..end].contains(fact), "{heading} lacks {fact}:\n{}", &section[..end]);
        }
    }
}
