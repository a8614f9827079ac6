//! Preparing a chat template's source for minijinja.
//!
//! transformers registers a `{% generation %}...{% endgeneration %}` block (it marks assistant
//! text for training masks) that renders its body unchanged. minijinja has no such tag, so we
//! rewrite it to `{% if true %}...{% endif %}`, which keeps the body and the whitespace-control
//! behaviour of a block tag.

/// Rewrites `generation` / `endgeneration` block tags; everything else is left as is.
pub(crate) fn rewrite_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        let (before, tag) = rest.split_at(start);
        out.push_str(before);
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let whole = &tag[..end + 2];
        let inner = &whole[2..end];
        let body = inner.trim_start_matches(['-', '+']);
        let body = body.strip_suffix(['-', '+']).unwrap_or(body);
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                let open = &inner[..inner.len() - inner.trim_start_matches(['-', '+']).len()];
                let trimmed_end = inner.trim_end();
                let close = if trimmed_end.ends_with(['-', '+']) { &trimmed_end[trimmed_end.len() - 1..] } else { "" };
                out.push_str(&format!("{{%{open} {r} {close}%}}"));
            }
            None => out.push_str(whole),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Whether the template reads a variable called `tools` (a whole identifier, not `my_tools`).
pub(crate) fn mentions_tools(src: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    src.match_indices("tools").any(|(i, m)| {
        let before = src[..i].chars().next_back();
        let after = src[i + m.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(
            rewrite_generation_tags("a{% generation %}b{%- endgeneration -%}c"),
            "a{% if true %}b{%- endif -%}c"
        );
        assert_eq!(rewrite_generation_tags("{% if x %}{{ y }}{% endif %}"), "{% if x %}{{ y }}{% endif %}");
        assert_eq!(rewrite_generation_tags("{% if"), "{% if");
    }

    #[test]
    fn tools_as_a_whole_word() {
        assert!(mentions_tools("{% if tools %}"));
        assert!(mentions_tools("{{ tools|tojson }}"));
        assert!(!mentions_tools("{{ my_tools }}"));
        assert!(!mentions_tools("{{ toolset }}"));
    }
}
