//! ID tokens: a JWS in compact form, checked against the provider's JSON Web Key Set (RS256, PS256, ES256,
//! EdDSA; never `none` or a shared-secret HMAC), and its claims checked as OpenID Connect Core §3.1.3.7 says:
//! issuer, audience (and `azp` when there are several), expiry, issue time, nonce.

use super::AuthError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{self, UnparsedPublicKey};
use serde_json::Value;

/// Seconds of clock difference tolerated between this machine and the provider.
pub const LEEWAY_S: i64 = 60;

/// A token split and decoded: header, claims, the signed part, the signature.
#[derive(Debug, Clone)]
pub struct Jws {
    /// The JOSE header (`alg`, `kid`).
    pub header: Value,
    /// The claims.
    pub claims: Value,
    signed: String,
    signature: Vec<u8>,
}

fn bad(what: impl Into<String>) -> AuthError {
    AuthError::Oidc(what.into())
}

fn b64(part: &str, what: &str) -> Result<Vec<u8>, AuthError> {
    URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| bad(format!("the ID token's {what} is not base64url")))
}

/// Splits and decodes a compact JWS (three base64url parts).
pub fn parse(token: &str) -> Result<Jws, AuthError> {
    let parts: Vec<&str> = token.split('.').collect();
    let [h, c, s] = parts[..] else { return Err(bad(format!("the ID token has {} parts, not 3", parts.len()))) };
    let json = |bytes: Vec<u8>, what: &str| -> Result<Value, AuthError> {
        serde_json::from_slice(&bytes).map_err(|_| bad(format!("the ID token's {what} is not JSON")))
    };
    Ok(Jws {
        header: json(b64(h, "header")?, "header")?,
        claims: json(b64(c, "claims")?, "claims")?,
        signed: format!("{h}.{c}"),
        signature: b64(s, "signature")?,
    })
}

fn key_field(jwk: &Value, name: &str) -> Result<Vec<u8>, AuthError> {
    let v = jwk[name].as_str().ok_or_else(|| bad(format!("a JWKS key lacks {name:?}")))?;
    b64(v, &format!("key's {name}"))
}

/// Whether `jwk` (one entry of a JWKS) signed `jws` with the algorithm its header names.
fn verify_with(jws: &Jws, alg: &str, jwk: &Value) -> Result<bool, AuthError> {
    let msg = jws.signed.as_bytes();
    let sig = &jws.signature;
    let ok = match (alg, jwk["kty"].as_str()) {
        ("RS256" | "PS256", Some("RSA")) => {
            let key = signature::RsaPublicKeyComponents { n: key_field(jwk, "n")?, e: key_field(jwk, "e")? };
            let params = if alg == "RS256" {
                &signature::RSA_PKCS1_2048_8192_SHA256
            } else {
                &signature::RSA_PSS_2048_8192_SHA256
            };
            key.verify(params, msg, sig).is_ok()
        }
        ("ES256", Some("EC")) if jwk["crv"] == "P-256" => {
            let mut point = vec![4u8];
            point.extend(key_field(jwk, "x")?);
            point.extend(key_field(jwk, "y")?);
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(msg, sig).is_ok()
        }
        ("EdDSA", Some("OKP")) if jwk["crv"] == "Ed25519" => {
            UnparsedPublicKey::new(&signature::ED25519, key_field(jwk, "x")?).verify(msg, sig).is_ok()
        }
        _ => false,
    };
    Ok(ok)
}

/// Checks the signature against the key set (`{"keys": [...]}`): the key the header's `kid` names, else every key
/// of the right type. Err names what failed.
pub fn verify_signature(jws: &Jws, jwks: &Value) -> Result<(), AuthError> {
    let alg = jws.header["alg"].as_str().unwrap_or("");
    if !matches!(alg, "RS256" | "PS256" | "ES256" | "EdDSA") {
        return Err(bad(format!("alg = {alg:?}: kvad accepts ID tokens signed with RS256, PS256, ES256 or EdDSA")));
    }
    let kid = jws.header["kid"].as_str();
    let keys = jwks["keys"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let candidates = keys.iter().filter(|k| kid.is_none_or(|kid| k["kid"].as_str() == Some(kid)));
    for k in candidates {
        if k["use"].as_str().is_some_and(|u| u != "sig") {
            continue;
        }
        if verify_with(jws, alg, k)? {
            return Ok(());
        }
    }
    Err(bad(format!("no key of the provider's JWKS verifies the signature (alg {alg}, kid {kid:?})")))
}

/// What the claims must say.
pub struct Expect<'a> {
    /// The issuer, exactly as configured and as the discovery document states it.
    pub issuer: &'a str,
    /// This server's client id.
    pub client_id: &'a str,
    /// The nonce sent with this login.
    pub nonce: &'a str,
    /// Now, in seconds since the epoch.
    pub now: i64,
}

/// Checks issuer, audience, authorised party, expiry, issue time and nonce; Err names the claim and its value.
pub fn check_claims(claims: &Value, e: &Expect<'_>) -> Result<(), AuthError> {
    let iss = claims["iss"].as_str().unwrap_or("");
    if iss != e.issuer {
        return Err(bad(format!("iss = {iss:?}, not the configured issuer {:?}", e.issuer)));
    }
    let aud: Vec<&str> = match &claims["aud"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !aud.contains(&e.client_id) {
        return Err(bad(format!("aud = {aud:?} does not include this client ({:?})", e.client_id)));
    }
    if aud.len() > 1 && claims["azp"].as_str() != Some(e.client_id) {
        return Err(bad(format!("azp = {} with several audiences: must be {:?}", claims["azp"], e.client_id)));
    }
    let exp = claims["exp"].as_i64().ok_or_else(|| bad("the ID token has no exp"))?;
    if exp + LEEWAY_S < e.now {
        return Err(bad(format!("exp = {exp}: the ID token expired (now {})", e.now)));
    }
    let iat = claims["iat"].as_i64().ok_or_else(|| bad("the ID token has no iat"))?;
    if iat > e.now + LEEWAY_S {
        return Err(bad(format!("iat = {iat}: issued in the future (now {})", e.now)));
    }
    let nonce = claims["nonce"].as_str().unwrap_or("");
    if !super::secret::constant_time_eq(nonce.as_bytes(), e.nonce.as_bytes()) {
        return Err(bad("nonce: not the one this login sent"));
    }
    if claims["sub"].as_str().is_none_or(str::is_empty) {
        return Err(bad("the ID token has no sub"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{Ed25519KeyPair, KeyPair};
    use serde_json::json;

    fn enc(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    fn signed(kp: &Ed25519KeyPair, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", enc(header), enc(claims));
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(kp.sign(input.as_bytes()).as_ref()))
    }

    fn keypair() -> Ed25519KeyPair {
        let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Ed25519KeyPair::from_pkcs8(doc.as_ref()).unwrap()
    }

    #[test]
    fn signatures_verify_against_the_right_key_only() {
        let (kp, other) = (keypair(), keypair());
        let jwk = |k: &Ed25519KeyPair, kid: &str| json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": URL_SAFE_NO_PAD.encode(k.public_key().as_ref())});
        let jwks = json!({"keys": [jwk(&other, "b"), jwk(&kp, "a")]});
        let t = signed(&kp, &json!({"alg": "EdDSA", "kid": "a"}), &json!({"sub": "1"}));
        assert!(verify_signature(&parse(&t).unwrap(), &jwks).is_ok());
        let no_kid = signed(&kp, &json!({"alg": "EdDSA"}), &json!({"sub": "1"}));
        assert!(verify_signature(&parse(&no_kid).unwrap(), &jwks).is_ok(), "without kid every key is tried");
        let wrong_kid = signed(&kp, &json!({"alg": "EdDSA", "kid": "b"}), &json!({"sub": "1"}));
        assert!(verify_signature(&parse(&wrong_kid).unwrap(), &jwks).is_err());
        // A changed claim breaks the signature.
        let mut parts: Vec<String> = t.split('.').map(str::to_string).collect();
        parts[1] = enc(&json!({"sub": "2"}));
        assert!(verify_signature(&parse(&parts.join(".")).unwrap(), &jwks).is_err());
        let none = format!("{}.{}.", enc(&json!({"alg": "none"})), enc(&json!({"sub": "1"})));
        let e = verify_signature(&parse(&none).unwrap(), &jwks).unwrap_err().to_string();
        assert!(e.contains("alg = \"none\""), "{e}");
        assert!(parse("a.b").unwrap_err().to_string().contains("2 parts"));
    }

    #[test]
    fn claims_are_checked_naming_the_claim() {
        let e = Expect { issuer: "https://id", client_id: "kvad", nonce: "n1", now: 1_000_000 };
        let good =
            json!({"iss": "https://id", "aud": "kvad", "exp": 1_000_100, "iat": 999_990, "nonce": "n1", "sub": "u"});
        assert!(check_claims(&good, &e).is_ok());
        let with = |k: &str, v: Value| {
            let mut c = good.clone();
            c[k] = v;
            check_claims(&c, &e).unwrap_err().to_string()
        };
        assert!(with("iss", json!("https://other")).contains("iss = \"https://other\""));
        assert!(with("aud", json!("someone")).contains("aud"));
        assert!(with("aud", json!(["kvad", "x"])).contains("azp"));
        assert!(with("exp", json!(999_000)).contains("expired"));
        assert!(with("iat", json!(1_000_500)).contains("future"));
        assert!(with("nonce", json!("n2")).contains("nonce"));
        assert!(with("sub", json!("")).contains("sub"));
        let mut multi = good.clone();
        multi["aud"] = json!(["kvad", "x"]);
        multi["azp"] = json!("kvad");
        assert!(check_claims(&multi, &e).is_ok());
    }
}
