//! Prompt suites: items of a prompt and an expected answer, and the scorers that judge a model's answer.
//!
//! Scorers, as a suite line's `scorer` or the run's default names them:
//! - `exact`: the answer, trimmed, equals the expected text, trimmed;
//! - `contains`: the expected text appears in the answer, ignoring case;
//! - `regex`: the expected text is a regular expression found in the answer;
//! - `choice`: the answer's first standalone capital letter (`B`, `(B)`, `B.`, `Answer: B`) is the expected
//!   letter — multiple-choice suites, where a model that explains itself still scores.

use serde_json::Value;

/// How an answer is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scorer {
    /// Trimmed equality.
    Exact,
    /// Case-insensitive substring.
    Contains,
    /// A regular expression found in the answer.
    Regex,
    /// The first standalone capital letter.
    Choice,
}

/// The scorers' names, for messages.
pub const SCORERS: &str = "exact, contains, regex, choice";

impl Scorer {
    /// The scorer called `name`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "exact" => Ok(Scorer::Exact),
            "contains" => Ok(Scorer::Contains),
            "regex" => Ok(Scorer::Regex),
            "choice" => Ok(Scorer::Choice),
            other => Err(format!("\"{other}\" is not one of {SCORERS}")),
        }
    }

    /// Whether `answer` is right. A regex that does not compile scores nothing (items are checked at upload).
    pub fn score(self, answer: &str, expected: &str) -> bool {
        match self {
            Scorer::Exact => answer.trim() == expected.trim(),
            Scorer::Contains => answer.to_lowercase().contains(&expected.trim().to_lowercase()),
            Scorer::Regex => regex::Regex::new(expected).is_ok_and(|r| r.is_match(answer)),
            Scorer::Choice => {
                first_letter(answer).is_some_and(|c| expected.trim().eq_ignore_ascii_case(&c.to_string()))
            }
        }
    }
}

/// The first capital letter standing alone: not inside a word (the `I` of "In" is not an answer).
fn first_letter(answer: &str) -> Option<char> {
    let chars: Vec<char> = answer.chars().collect();
    (0..chars.len()).find_map(|i| {
        let c = chars[i];
        let alone = |j: Option<&char>| j.is_none_or(|d| !d.is_alphanumeric());
        (c.is_ascii_uppercase() && alone(i.checked_sub(1).and_then(|p| chars.get(p))) && alone(chars.get(i + 1)))
            .then_some(c)
    })
}

/// One item of a suite.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Item {
    /// What the model is asked (as a user turn).
    pub prompt: String,
    /// What a right answer is.
    pub expected: String,
    /// This item's scorer, when it names one (else the run's).
    pub scorer: Option<Scorer>,
}

impl Item {
    /// Reads a suite line's object, naming the field a bad one got wrong.
    pub fn from_json(v: &Value) -> Result<Self, (String, String)> {
        let text = |k: &str| match v.get(k) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err((k.to_string(), "is empty".to_string())),
            Some(_) => Err((k.to_string(), "must be a string".to_string())),
            None => Err((k.to_string(), "is missing".to_string())),
        };
        let (prompt, expected) = (text("prompt")?, text("expected")?);
        let scorer = match v.get("scorer") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Scorer::parse(s).map_err(|e| ("scorer".to_string(), e))?),
            Some(_) => return Err(("scorer".into(), "must be a string".into())),
        };
        if scorer == Some(Scorer::Regex) {
            regex::Regex::new(&expected)
                .map_err(|e| ("expected".to_string(), format!("not a regular expression: {e}")))?;
        }
        if let Some(k) =
            v.as_object().and_then(|o| o.keys().find(|k| !["prompt", "expected", "scorer"].contains(&k.as_str())))
        {
            return Err((k.clone(), "is not a suite field (prompt, expected, scorer)".into()));
        }
        Ok(Item { prompt, expected, scorer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_scorer_judges_as_documented() {
        assert!(Scorer::Exact.score("  Paris\n", "Paris"));
        assert!(!Scorer::Exact.score("Paris.", "Paris"));
        assert!(Scorer::Contains.score("It is PARIS, of course.", "paris"));
        assert!(!Scorer::Contains.score("Lyon", "paris"));
        assert!(Scorer::Regex.score("the answer is 42", r"\b42\b"));
        assert!(!Scorer::Regex.score("420", r"\b42\b"));
        assert!(Scorer::Choice.score("(B) because of the cat", "B"));
        assert!(Scorer::Choice.score("In my view: C.", "c"), "the I of In is a word, not an answer");
        assert!(!Scorer::Choice.score("I think A", "A"), "a lone I counts as the first letter");
        assert!(!Scorer::Choice.score("no letter here", "A"));
    }

    #[test]
    fn items_name_the_field_they_get_wrong() {
        let ok = Item::from_json(&json!({"prompt": "2+2?", "expected": "4", "scorer": "contains"})).unwrap();
        assert_eq!(ok.scorer, Some(Scorer::Contains));
        let err = |v: Value| Item::from_json(&v).unwrap_err();
        assert_eq!(err(json!({"prompt": "x"})).0, "expected");
        assert_eq!(err(json!({"prompt": "x", "expected": 4})), ("expected".into(), "must be a string".into()));
        assert_eq!(err(json!({"prompt": "x", "expected": "y", "scorer": "fuzzy"})).0, "scorer");
        assert_eq!(err(json!({"prompt": "x", "expected": "(", "scorer": "regex"})).0, "expected");
        assert_eq!(err(json!({"prompt": "x", "expected": "y", "answer": "z"})).0, "answer");
    }
}
