//! The bearer-token check: Metacontroller's `webhook.authorization` sends
//! `Authorization: Bearer <token>` read from a Secret; opshooks reads the
//! same Secret mounted as a file. Without it, whoever reaches the port can
//! answer for us (and Metacontroller applies answers with its own,
//! cluster-wide, permissions).

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use subtle::ConstantTimeEq;

use super::error::{Problem, Refusal};
use super::reload::Reloading;

/// The token every protected route requires, reloaded when its file changes.
pub type Token = Reloading<Vec<u8>>;

/// Reads the token file (surrounding whitespace, such as the newline an
/// editor adds, is not part of the token).
pub fn load(path: PathBuf) -> Result<Token, String> {
    Reloading::load("bearer token", vec![path], |files| {
        let token = files[0].trim_ascii();
        if token.is_empty() {
            return Err("--auth-token-file is empty; put the token in it".into());
        }
        if !token.iter().all(|b| b.is_ascii_graphic()) {
            return Err("--auth-token-file holds spaces or control characters; a bearer token is one printable word".into());
        }
        Ok(token.to_vec())
    })
}

/// Checks the request's `Authorization` header against `token`: `Ok` when
/// it carries exactly the token, a 401 problem otherwise. The comparison
/// takes the same time wherever the first wrong byte is.
pub fn check(token: &Arc<Token>, headers: &HeaderMap) -> Result<(), Problem> {
    let given = headers
        .get(header::AUTHORIZATION)
        .map(|value| value.as_bytes());
    let Some(given) = given else {
        return Err(unauthorized(
            "this route needs an Authorization: Bearer header; set the hook's webhook.authorization to the token's Secret",
        ));
    };
    let credential = match given.split_at_checked(7) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"bearer ") => rest.trim_ascii(),
        _ => {
            return Err(unauthorized(
                "the Authorization header is not a Bearer token; use the Bearer scheme",
            ));
        }
    };
    let expected = token.current();
    if bool::from(credential.ct_eq(expected.as_slice())) {
        Ok(())
    } else {
        Err(unauthorized(
            "the bearer token is not the one this server has; check that the hook's authorization Secret and --auth-token-file hold the same token",
        ))
    }
}

fn unauthorized(detail: &str) -> Problem {
    Problem::from(Refusal::Unauthorized(detail.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use axum::http::StatusCode;

    fn token() -> Arc<Token> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-token\n").unwrap();
        Arc::new(load(path).unwrap())
    }

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_the_exact_token_passes() {
        let token = token();
        assert!(check(&token, &with("Bearer s3cret-token")).is_ok());
        assert!(check(&token, &with("bearer s3cret-token")).is_ok());
        for wrong in [
            "Bearer s3cret-toke",
            "Bearer s3cret-token2",
            "Bearer ",
            "Basic czNjcmV0LXRva2Vu",
            "s3cret-token",
        ] {
            let problem = check(&token, &with(wrong)).unwrap_err();
            assert_eq!(problem.status, StatusCode::UNAUTHORIZED, "{wrong}");
        }
        let missing = check(&token, &HeaderMap::new()).unwrap_err();
        assert!(
            missing.detail.contains("webhook.authorization"),
            "{}",
            missing.detail
        );
    }

    #[test]
    fn empty_or_multi_word_token_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, " \n").unwrap();
        assert!(load(path.clone()).unwrap_err().contains("is empty"));
        std::fs::write(&path, "two words").unwrap();
        assert!(load(path).unwrap_err().contains("one printable word"));
    }
}
