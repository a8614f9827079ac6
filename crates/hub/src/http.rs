//! The one HTTP client of kvad (only this crate does network IO): ureq over rustls, redirects followed by hand so
//! a loop is named, the token sent only to the Hub's own origin, and HTTP statuses turned into errors that say
//! what to do (a gated repo names `HF_TOKEN`).

use crate::HubError;
use std::time::Duration;

/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 10;

/// A response: status, headers we read, and the body.
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// The final URL (after redirects).
    pub url: String,
    inner: ureq::http::Response<ureq::Body>,
    /// Headers of the first (pre-redirect) response, where the Hub puts `X-Repo-Commit` and `X-Linked-Etag`.
    pub first_headers: ureq::http::HeaderMap,
}

impl Response {
    /// A header of the final response.
    pub fn header(&self, name: &str) -> Option<String> {
        self.inner.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }

    /// The body as a reader.
    pub fn into_reader(self) -> impl std::io::Read {
        self.inner.into_body().into_reader()
    }

    /// The whole body, refusing more than `limit` bytes.
    pub fn read_limited(self, limit: u64, what: &str) -> Result<Vec<u8>, HubError> {
        use std::io::Read;
        let url = self.url.clone();
        let mut buf = Vec::new();
        self.into_reader()
            .take(limit + 1)
            .read_to_end(&mut buf)
            .map_err(|e| HubError::Unreachable { url: url.clone(), detail: format!("reading the body: {e}") })?;
        if buf.len() as u64 > limit {
            return Err(HubError::Invalid {
                field: what.into(),
                value: format!("more than {limit} bytes"),
                why: "larger than kvad accepts for this kind of file; refused".into(),
            });
        }
        Ok(buf)
    }
}

/// What a request is about, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject<'a> {
    /// A Hugging Face repo (`owner/name`), for the token and gated-repo advice.
    Repo(&'a str),
    /// Anything else (the Ollama registry, the model index).
    Other(&'a str),
}

/// An HTTP client with kvad's settings.
pub struct Client {
    agent: ureq::Agent,
    token: Option<String>,
    /// Origin (`scheme://host[:port]`) the token may be sent to.
    token_origin: Option<String>,
}

fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

fn join(base: &str, location: &str) -> Result<String, HubError> {
    if location.starts_with("http://") || location.starts_with("https://") {
        Ok(location.to_string())
    } else if location.starts_with('/') && !location.starts_with("//") {
        Ok(format!("{}{location}", origin(base)))
    } else {
        Err(HubError::Invalid {
            field: "redirect Location".into(),
            value: location.into(),
            why: "expected an absolute URL or an absolute path".into(),
        })
    }
}

impl Client {
    /// A client; `token` is sent as a bearer token to `token_origin` only (the Hub, never a CDN it redirects to).
    pub fn new(token: Option<String>, token_base: Option<&str>) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .timeout_recv_body(Some(Duration::from_secs(60)))
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(format!("kvad/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client { agent, token, token_origin: token_base.map(|b| origin(b).to_string()) }
    }

    /// A client for the Hub the environment names, with the environment's token.
    pub fn for_hub() -> Self {
        Self::new(crate::config::hf_token(), Some(&crate::config::hf_endpoint()))
    }

    /// Whether a token is configured.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// GET `url`, following redirects (at most [`MAX_REDIRECTS`], never the same URL twice), with `Range:
    /// bytes=<from>-` when `range_from` is set and extra `headers`. Returns 2xx responses (and 416 for a range);
    /// other statuses become errors about `subject`.
    pub fn get(
        &self,
        url: &str,
        range_from: Option<u64>,
        headers: &[(&str, &str)],
        subject: Subject<'_>,
    ) -> Result<Response, HubError> {
        let mut seen = vec![url.to_string()];
        let mut current = url.to_string();
        let mut first_headers = None;
        loop {
            let mut req = self.agent.get(&current).header("Accept-Encoding", "identity");
            if let (Some(t), Some(o)) = (&self.token, &self.token_origin) {
                if origin(&current) == o {
                    req = req.header("Authorization", &format!("Bearer {t}"));
                }
            }
            if let Some(from) = range_from.filter(|f| *f > 0) {
                req = req.header("Range", &format!("bytes={from}-"));
            }
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let resp = req.call().map_err(|e| HubError::Unreachable { url: current.clone(), detail: e.to_string() })?;
            let status = resp.status().as_u16();
            if first_headers.is_none() {
                first_headers = Some(resp.headers().clone());
            }
            if (300..400).contains(&status) {
                let loc = resp.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or_default();
                let next = join(&current, loc)?;
                if seen.contains(&next) {
                    return Err(HubError::Invalid {
                        field: "redirect".into(),
                        value: next,
                        why: format!("a redirect loop ({} hops); nothing was downloaded from it", seen.len()),
                    });
                }
                if seen.len() > MAX_REDIRECTS {
                    return Err(HubError::Invalid {
                        field: "redirect".into(),
                        value: url.into(),
                        why: format!("more than {MAX_REDIRECTS} redirects"),
                    });
                }
                seen.push(next.clone());
                current = next;
                continue;
            }
            if (200..300).contains(&status) || (status == 416 && range_from.is_some()) {
                return Ok(Response {
                    status,
                    url: current,
                    inner: resp,
                    first_headers: first_headers.unwrap_or_default(),
                });
            }
            return Err(self.status_error(status, &current, resp.headers(), subject));
        }
    }

    fn status_error(&self, status: u16, url: &str, h: &ureq::http::HeaderMap, subject: Subject<'_>) -> HubError {
        let hv = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let (code, message) = (hv("x-error-code"), hv("x-error-message"));
        match (subject, status) {
            (Subject::Repo(repo), 401 | 403 | 404) if code == "RepoNotFound" => HubError::NotFound {
                what: format!("the repo {repo}"),
                url: url.into(),
                detail: "if it is private or gated, set HF_TOKEN to a token that can read it".into(),
            },
            (Subject::Repo(repo), 401 | 403) => {
                HubError::Gated { repo: repo.into(), status, had_token: self.token.is_some(), detail: message }
            }
            (Subject::Repo(repo), 404) => HubError::NotFound {
                what: match code.as_str() {
                    "RevisionNotFound" => format!("the revision asked of {repo}"),
                    "EntryNotFound" => format!("a file of {repo}"),
                    _ => format!("the repo {repo}"),
                },
                url: url.into(),
                detail: message,
            },
            (Subject::Other(what), 404) => HubError::NotFound { what: what.into(), url: url.into(), detail: message },
            _ => HubError::Http { url: url.into(), status, detail: message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_redirects_keep_the_origin() {
        assert_eq!(join("http://h:1/a/b", "/c").unwrap(), "http://h:1/c");
        assert_eq!(join("http://h:1/a", "https://cdn/x").unwrap(), "https://cdn/x");
        assert!(join("http://h/a", "//evil/x").is_err());
        assert_eq!(origin("https://huggingface.co/api/x"), "https://huggingface.co");
    }
}
