//! Label selectors (`matchLabels` + `matchExpressions`) compiled once per policy and matched
//! against label maps, with the semantics of `metav1.LabelSelectorAsSelector`.

use super::labels::LabelLookup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One compiled requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &impl LabelLookup) -> bool {
        let one_of = |vs: &[String], v: &str| vs.iter().any(|x| x == v);
        match self {
            Requirement::Equals(k, v) => labels.label(k) == Some(v.as_str()),
            Requirement::In(k, vs) => labels.label(k).is_some_and(|v| one_of(vs, v)),
            Requirement::NotIn(k, vs) => labels.label(k).is_none_or(|v| !one_of(vs, v)),
            Requirement::Exists(k) => labels.label(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label(k).is_none(),
        }
    }
}

/// A compiled label selector. An absent or empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// Why a selector cannot be used (the API server accepts these; only the operator can tell).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "matchExpressions[{index}] (key {key:?}): unknown operator {operator:?}, expected In, NotIn, Exists or DoesNotExist"
    )]
    UnknownOperator { index: usize, key: String, operator: String },
    #[error(
        "matchExpressions[{index}] (key {key:?}): operator {operator} needs at least one value"
    )]
    MissingValues { index: usize, key: String, operator: String },
    #[error("matchExpressions[{index}] (key {key:?}): operator {operator} takes no values")]
    UnexpectedValues { index: usize, key: String, operator: String },
    #[error("matchExpressions[{index}]: empty key")]
    EmptyKey { index: usize },
    /// A key or value that no label can have: it would silently match nothing (or, in NotIn
    /// and DoesNotExist, everything).
    #[error("{at}: {what} {text:?} is not a valid label {what}: {why}")]
    Invalid { at: String, what: &'static str, text: String, why: String },
}

/// Why `name` is not a label name or value part (at most 63 characters, alphanumerics at both
/// ends, `-`, `_` and `.` between); `None` when it is. An empty value is valid, an empty name
/// is not (`allow_empty`).
fn name_problem(name: &str, allow_empty: bool) -> Option<String> {
    let ok_inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() {
        return (!allow_empty).then(|| "it is empty".to_string());
    }
    if name.len() > 63 {
        return Some(format!("{} characters, at most 63", name.len()));
    }
    if let Some(bad) = name.chars().find(|c| !ok_inner(*c)) {
        return Some(format!("{bad:?} is not allowed (letters, digits, '-', '_', '.')"));
    }
    if !ends_ok(name.chars().next()) || !ends_ok(name.chars().last()) {
        return Some("it must start and end with a letter or digit".into());
    }
    None
}

/// Why `key` is not a label key (`[prefix/]name`, the prefix a DNS subdomain); `None` when it is.
fn key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Some(format!("prefix {prefix:?} is not a DNS subdomain"));
        }
    }
    name_problem(name, false)
}

fn check_key(at: &str, key: &str) -> Result<(), SelectorError> {
    match key_problem(key) {
        Some(why) => {
            Err(SelectorError::Invalid { at: at.into(), what: "key", text: key.into(), why })
        }
        None => Ok(()),
    }
}

fn check_value(at: &str, value: &str) -> Result<(), SelectorError> {
    match name_problem(value, true) {
        Some(why) => {
            Err(SelectorError::Invalid { at: at.into(), what: "value", text: value.into(), why })
        }
        None => Ok(()),
    }
}

impl Selector {
    /// The selector that selects every label set.
    pub fn everything() -> Self {
        Selector::default()
    }

    /// Compiles a Kubernetes `LabelSelector`; `None` selects everything.
    pub fn compile(selector: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        let Some(selector) = selector else {
            return Ok(Selector::everything());
        };
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            check_key("matchLabels", k)?;
            check_value(&format!("matchLabels[{k:?}]"), v)?;
            requirements.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for (index, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let key = expr.key.clone();
            if key.is_empty() {
                return Err(SelectorError::EmptyKey { index });
            }
            let at = format!("matchExpressions[{index}]");
            check_key(&at, &key)?;
            let values = expr.values.clone().unwrap_or_default();
            for value in &values {
                check_value(&at, value)?;
            }
            let operator = expr.operator.clone();
            let requirement = match operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError::MissingValues { index, key, operator });
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::UnexpectedValues { index, key, operator });
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                _ => return Err(SelectorError::UnknownOperator { index, key, operator }),
            };
            requirements.push(requirement);
        }
        Ok(Selector { requirements })
    }

    /// Whether every requirement holds for `labels` (a pod's map or a node's [`Labels`]).
    ///
    /// [`Labels`]: super::labels::Labels
    pub fn matches(&self, labels: &impl LabelLookup) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector selects everything.
    pub fn selects_all(&self) -> bool {
        self.requirements.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).expect("valid LabelSelector")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn matching_table() {
        use serde_json::json;
        let zone_a = labels(&[("zone", "a"), ("tier", "web")]);
        let zone_b = labels(&[("zone", "b")]);
        let none = labels(&[]);
        let table = [
            ("absent selector", None, [true, true, true]),
            ("empty selector", Some(json!({})), [true, true, true]),
            ("matchLabels", Some(json!({"matchLabels": {"zone": "a"}})), [true, false, false]),
            (
                "matchLabels all must hold",
                Some(json!({"matchLabels": {"zone": "a", "tier": "db"}})),
                [false, false, false],
            ),
            (
                "In",
                Some(
                    json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "c"]}]}),
                ),
                [true, false, false],
            ),
            (
                "NotIn matches absent keys",
                Some(
                    json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
                ),
                [false, true, true],
            ),
            (
                "Exists",
                Some(json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})),
                [true, false, false],
            ),
            (
                "DoesNotExist",
                Some(json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]})),
                [false, true, true],
            ),
            (
                "labels and expressions combine with AND",
                Some(json!({"matchLabels": {"zone": "b"},
                    "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]})),
                [false, true, false],
            ),
        ];
        for (case, sel, want) in table {
            let sel = sel.map(selector);
            let compiled = Selector::compile(sel.as_ref()).expect(case);
            let got =
                [compiled.matches(&zone_a), compiled.matches(&zone_b), compiled.matches(&none)];
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn label_keys_and_values_are_checked() {
        use serde_json::json;
        // (selector, the error's text must contain; "" for valid)
        let table = [
            (json!({"matchLabels": {"app": "web"}}), ""),
            (json!({"matchLabels": {"example.com/tier": "a.b_c-d"}}), ""),
            (json!({"matchLabels": {"app": ""}}), ""),
            (json!({"matchLabels": {"bad key!": "x"}}), "matchLabels: key \"bad key!\""),
            (json!({"matchLabels": {"app": "-web"}}), "must start and end"),
            (json!({"matchLabels": {"Example.com/app": "x"}}), "not a DNS subdomain"),
            (json!({"matchLabels": {"/app": "x"}}), "not a DNS subdomain"),
            (json!({"matchLabels": {"app": "x".repeat(64)}}), "64 characters, at most 63"),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["ok", "no way"]}]}),
                "matchExpressions[0]: value \"no way\"",
            ),
            (
                json!({"matchExpressions": [{"key": "x/y/z", "operator": "Exists"}]}),
                "not a DNS subdomain",
            ),
        ];
        for (sel, want) in table {
            let got = Selector::compile(Some(&selector(sel.clone())));
            match (got, want) {
                (Ok(_), "") => {}
                (Err(e), want) if !want.is_empty() => {
                    assert!(e.to_string().contains(want), "{sel}: {e}")
                }
                (got, want) => panic!("{sel}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn compile_errors_table() {
        use serde_json::json;
        let table = [
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "Equals", "values": ["a"]}]}),
                SelectorError::UnknownOperator {
                    index: 0,
                    key: "zone".into(),
                    operator: "Equals".into(),
                },
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists"},
                    {"key": "zone", "operator": "In", "values": []}]}),
                SelectorError::MissingValues {
                    index: 1,
                    key: "zone".into(),
                    operator: "In".into(),
                },
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn"}]}),
                SelectorError::MissingValues {
                    index: 0,
                    key: "zone".into(),
                    operator: "NotIn".into(),
                },
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]}),
                SelectorError::UnexpectedValues {
                    index: 0,
                    key: "zone".into(),
                    operator: "Exists".into(),
                },
            ),
            (
                json!({"matchExpressions": [{"key": "", "operator": "Exists"}]}),
                SelectorError::EmptyKey { index: 0 },
            ),
        ];
        for (sel, want) in table {
            assert_eq!(Selector::compile(Some(&selector(sel.clone()))), Err(want), "{sel}");
        }
    }

    #[test]
    fn selects_all() {
        assert!(Selector::everything().selects_all());
        let sel = selector(serde_json::json!({"matchLabels": {"a": "b"}}));
        assert!(!Selector::compile(Some(&sel)).expect("valid").selects_all());
    }
}
