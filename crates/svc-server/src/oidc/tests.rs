//! The ID token checks, with keys made here (ES256 and EdDSA; RS256 is
//! what the browser test's real provider signs with).

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::json;

use super::*;

const NOW: i64 = 1_800_000_000;
const ISSUER: &str = "https://id.example";
const CLIENT: &str = "svc";
const NONCE: &str = "n0nce";

fn expected() -> Expected<'static> {
    Expected {
        issuer: ISSUER,
        client_id: CLIENT,
        nonce: NONCE,
    }
}

fn good_claims() -> Value {
    json!({
        "iss": ISSUER, "aud": CLIENT, "sub": "user-1", "exp": NOW + 300, "iat": NOW,
        "nonce": NONCE, "email": "alice@example.com", "email_verified": true,
    })
}

/// A P-256 key and its JWK.
struct Es256 {
    pair: EcdsaKeyPair,
    jwk: Jwk,
}

impl Es256 {
    fn new(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let jwk = Jwk {
            kty: "EC".into(),
            kid: Some(kid.into()),
            crv: Some("P-256".into()),
            x: Some(B64.encode(&point[1..33])),
            y: Some(B64.encode(&point[33..65])),
            ..Jwk::default()
        };
        Es256 { pair, jwk }
    }

    fn sign(&self, header: &Value, claims: &Value) -> String {
        let input = signing_input(header, claims);
        let signature = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", B64.encode(signature.as_ref()))
    }

    fn token(&self, claims: &Value) -> String {
        self.sign(
            &json!({"alg": "ES256", "kid": self.jwk.kid, "typ": "JWT"}),
            claims,
        )
    }
}

fn signing_input(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}",
        B64.encode(serde_json::to_vec(header).unwrap()),
        B64.encode(serde_json::to_vec(claims).unwrap())
    )
}

fn check(token: &str, keys: &[Jwk]) -> Result<Value, IdTokenError> {
    verify_id_token(token, keys, &expected(), NOW)
}

#[test]
fn a_good_token_is_accepted_with_its_claims() {
    let key = Es256::new("k1");
    let claims = check(&key.token(&good_claims()), std::slice::from_ref(&key.jwk)).unwrap();
    let identity = identity_of(&claims).unwrap();
    assert_eq!(identity.subject, "user-1");
    assert_eq!(identity.email.as_deref(), Some("alice@example.com"));
    assert!(identity.email_verified);
}

#[test]
fn an_ed25519_token_is_accepted() {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let jwk = Jwk {
        kty: "OKP".into(),
        crv: Some("Ed25519".into()),
        x: Some(B64.encode(pair.public_key().as_ref())),
        ..Jwk::default()
    };
    let input = signing_input(&json!({"alg": "EdDSA"}), &good_claims());
    let token = format!(
        "{input}.{}",
        B64.encode(pair.sign(input.as_bytes()).as_ref())
    );
    check(&token, &[jwk]).unwrap();
}

#[test]
fn another_keys_signature_is_refused() {
    let key = Es256::new("k1");
    let impostor = Es256::new("k1");
    assert_eq!(
        check(
            &impostor.token(&good_claims()),
            std::slice::from_ref(&key.jwk)
        ),
        Err(IdTokenError::Signature)
    );
}

#[test]
fn changed_claims_break_the_signature() {
    let key = Es256::new("k1");
    let token = key.token(&good_claims());
    let mut parts: Vec<&str> = token.split('.').collect();
    let mut claims = good_claims();
    claims["email"] = json!("mallory@example.com");
    let forged = B64.encode(serde_json::to_vec(&claims).unwrap());
    parts[1] = &forged;
    assert_eq!(
        check(&parts.join("."), std::slice::from_ref(&key.jwk)),
        Err(IdTokenError::Signature)
    );
}

#[test]
fn unsigned_and_shared_secret_tokens_are_refused() {
    let key = Es256::new("k1");
    let input = signing_input(&json!({"alg": "none"}), &good_claims());
    assert_eq!(
        check(&format!("{input}."), std::slice::from_ref(&key.jwk)),
        Err(IdTokenError::Algorithm("none".into()))
    );
    // HS256 keyed with the public key's bytes: the classic confusion.
    let input = signing_input(&json!({"alg": "HS256", "kid": "k1"}), &good_claims());
    assert_eq!(
        check(&format!("{input}.AAAA"), std::slice::from_ref(&key.jwk)),
        Err(IdTokenError::Algorithm("HS256".into()))
    );
    // A critical extension this code does not know.
    let critical = key.sign(
        &json!({"alg": "ES256", "kid": "k1", "crit": ["exp-ext"], "exp-ext": 1}),
        &good_claims(),
    );
    assert_eq!(
        check(&critical, std::slice::from_ref(&key.jwk)),
        Err(IdTokenError::Malformed)
    );
    assert_eq!(check("not-a-jwt", &[key.jwk]), Err(IdTokenError::Malformed));
}

#[test]
fn an_unknown_key_id_finds_no_key() {
    let key = Es256::new("k2");
    let mut known = key.jwk.clone();
    known.kid = Some("k1".into());
    assert_eq!(
        check(&key.token(&good_claims()), &[known]),
        Err(IdTokenError::NoKey)
    );
}

#[test]
fn each_claim_is_checked() {
    let key = Es256::new("k1");
    let keys = [key.jwk.clone()];
    let with = |name: &str, value: Value| {
        let mut claims = good_claims();
        claims[name] = value;
        check(&key.token(&claims), &keys)
    };
    assert_eq!(
        with("iss", json!("https://evil.example")),
        Err(IdTokenError::Issuer("https://evil.example".into()))
    );
    assert_eq!(with("aud", json!("other")), Err(IdTokenError::Audience));
    // Several audiences need azp naming us.
    assert_eq!(
        with("aud", json!(["other", CLIENT])),
        Err(IdTokenError::Audience)
    );
    let mut claims = good_claims();
    claims["aud"] = json!(["other", CLIENT]);
    claims["azp"] = json!(CLIENT);
    assert!(check(&key.token(&claims), &keys).is_ok());
    assert_eq!(with("azp", json!("other")), Err(IdTokenError::Audience));
    assert_eq!(
        with("nbf", json!(NOW + 3600)),
        Err(IdTokenError::IssuedLater)
    );
    assert!(with("nbf", json!(NOW - 10)).is_ok());
    assert_eq!(with("exp", json!(NOW - 600)), Err(IdTokenError::Expired));
    assert!(
        with("exp", json!(NOW - 60)).is_ok(),
        "a minute of clock skew"
    );
    assert_eq!(
        with("iat", json!(NOW + 3600)),
        Err(IdTokenError::IssuedLater)
    );
    assert_eq!(with("nonce", json!("other")), Err(IdTokenError::Nonce));
    assert_eq!(with("nonce", Value::Null), Err(IdTokenError::Nonce));
    assert_eq!(with("sub", json!("")), Err(IdTokenError::Subject));
    let mut claims = good_claims();
    claims.as_object_mut().unwrap().remove("exp");
    assert_eq!(
        check(&key.token(&claims), &keys),
        Err(IdTokenError::Expired)
    );
}

#[test]
fn an_unverified_or_string_verified_email_is_told() {
    let mut claims = good_claims();
    claims["email_verified"] = json!(false);
    assert!(!identity_of(&claims).unwrap().email_verified);
    claims["email_verified"] = json!("true");
    assert!(identity_of(&claims).unwrap().email_verified);
    claims.as_object_mut().unwrap().remove("email_verified");
    assert!(!identity_of(&claims).unwrap().email_verified);
}

#[test]
fn a_flow_survives_its_cookie_and_sends_an_s256_challenge() {
    let flow = Flow::new("/dashboard/device?user_code=BCDF-GHJK".into());
    assert_eq!(Flow::decode(&flow.encode()), Some(flow.clone()));
    assert_eq!(Flow::decode("garbage!"), None);
    assert_ne!(flow.state, flow.nonce);
    // RFC 7636 appendix B's example.
    let known = Flow {
        verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
        ..flow
    };
    assert_eq!(
        known.challenge(),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
}
