//! A short, stable digest of an object's JSON: FNV-1a (64 bits), in hex.
//! For telling one version of an object from another (a pod template the
//! hook wrote, a template the simulated StatefulSet controller runs), never
//! for security. Same object, same digest: no randomness, no time.

use serde::Serialize;

/// The digest of `value`'s JSON.
pub fn of_json(value: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_object_has_the_same_digest_and_another_another() {
        let a = of_json(&json!({"image": "postgres:16"}));
        assert_eq!(a, of_json(&json!({"image": "postgres:16"})));
        assert_ne!(a, of_json(&json!({"image": "postgres:16.1"})));
        assert_eq!(a.len(), 16);
    }
}
