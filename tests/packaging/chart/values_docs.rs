//! `chart-values-docs`: `values.yaml`, `values.schema.json` and the values table in the chart's
//! README say the same thing. Every value has a schema entry with a type that fits its default
//! and a description; every schema entry has a value (but the free-form ones and Helm's
//! `global`); and the README's table is exactly the one made from both, in values.yaml's order.
//! `UPDATE_GENERATED=1` rewrites the table instead of failing.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use yaml_serde::Value as Yaml;

use crate::support::chart::CHART;
use crate::support::cluster::repo_root;

const BEGIN: &str =
    "<!-- values-table:begin (generated from values.yaml and values.schema.json) -->";
const END: &str = "<!-- values-table:end -->";

pub(super) fn values_yaml_schema_and_readme_agree() -> Result<()> {
    let dir = repo_root().join(CHART);
    let values: Yaml = yaml_serde::from_str(&std::fs::read_to_string(dir.join("values.yaml"))?)?;
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("values.schema.json"))?)?;

    let mut rows = Vec::new();
    let mut problems = Vec::new();
    walk(&values, &schema, "", &mut rows, &mut problems);
    ensure!(problems.is_empty(), "{} problems:\n  {}", problems.len(), problems.join("\n  "));

    let mut table =
        String::from("| value | type | default | description |\n| --- | --- | --- | --- |\n");
    for row in &rows {
        table.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            row.path,
            row.kind,
            row.default.replace('|', "\\|"),
            row.description.replace('|', "\\|")
        ));
    }
    let readme_path = dir.join("README.md");
    let readme = std::fs::read_to_string(&readme_path)?;
    let (before, rest) =
        readme.split_once(BEGIN).context("the chart's README has no values-table:begin marker")?;
    let (current, after) =
        rest.split_once(END).context("the chart's README has no values-table:end marker")?;
    let wanted = format!("\n{table}");
    if current == wanted {
        return Ok(());
    }
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&readme_path, format!("{before}{BEGIN}{wanted}{END}{after}"))?;
        return Ok(());
    }
    anyhow::bail!(
        "{} has a values table that differs from values.yaml and values.schema.json; regenerate it \
         with UPDATE_GENERATED=1 cargo test --test packaging -- --exact chart-values-docs",
        readme_path.display()
    )
}

struct Row {
    path: String,
    kind: String,
    default: String,
    description: String,
}

fn walk(value: &Yaml, schema: &Value, path: &str, rows: &mut Vec<Row>, problems: &mut Vec<String>) {
    let properties = schema["properties"].as_object();
    let closed = schema["additionalProperties"] == false;
    match (value, properties) {
        // A group of values: each key is described by the schema, and (when the schema lists
        // what the group may hold) every entry of the schema has a value.
        (Yaml::Mapping(map), Some(properties)) if closed => {
            for (key, child) in map {
                let key = key.as_str().unwrap_or_default();
                let child_path =
                    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
                match properties.get(key) {
                    Some(child_schema) => walk(child, child_schema, &child_path, rows, problems),
                    None => {
                        problems.push(format!("{child_path}: in values.yaml, not in the schema"))
                    }
                }
            }
            for key in properties.keys() {
                let in_values = map.keys().any(|k| k.as_str() == Some(key.as_str()));
                // Helm's own `global` is no value of ours.
                let helm_global = path.is_empty() && key == "global";
                if !in_values && !helm_global {
                    let key_path =
                        if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                    problems.push(format!("{key_path}: in the schema, not in values.yaml"));
                }
            }
        }
        _ => {
            let default = serde_json::to_value(value).unwrap_or(Value::Null);
            // The types the schema allows, also as alternatives (oneOf, anyOf).
            let alternatives = schema["oneOf"].as_array().or(schema["anyOf"].as_array());
            let kinds: Vec<&str> = std::iter::once(schema)
                .chain(alternatives.into_iter().flatten())
                .flat_map(|s| match &s["type"] {
                    Value::String(kind) => vec![kind.as_str()],
                    Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                })
                .collect();
            let fits = |kind: &&str| match *kind {
                "string" => default.is_string(),
                "integer" => default.is_i64() || default.is_u64(),
                "number" => default.is_number(),
                "boolean" => default.is_boolean(),
                "array" => default.is_array(),
                "object" => default.is_object(),
                _ => false,
            };
            if kinds.is_empty() {
                problems.push(format!("{path}: the schema gives no type"));
            } else if !kinds.iter().any(fits) {
                problems.push(format!("{path}: the default {default} is not a {kinds:?}"));
            }
            let description = schema["description"].as_str().unwrap_or_default();
            if description.is_empty() {
                problems.push(format!("{path}: the schema has no description"));
            }
            let kind = kinds.join(" or ");
            rows.push(Row {
                path: path.to_string(),
                kind,
                default: default.to_string(),
                description: description.to_string(),
            });
        }
    }
}
