//! Label selectors (`matchLabels` + `matchExpressions`) compiled once per policy and matched
//! against label maps, with the semantics of `metav1.LabelSelectorAsSelector`.

use std::collections::BTreeMap;

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
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
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
            requirements.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for (index, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let key = expr.key.clone();
            if key.is_empty() {
                return Err(SelectorError::EmptyKey { index });
            }
            let values = expr.values.clone().unwrap_or_default();
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

    /// Whether every requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector selects everything.
    pub fn selects_all(&self) -> bool {
        self.requirements.is_empty()
    }
}

#[cfg(test)]
mod tests {
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
