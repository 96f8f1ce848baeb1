//! An object's UID, kept for every node without a block of its own.
//!
//! The API server gives every object a UUID in its 36-character text form. As a `String` that
//! is 24 bytes inline and a 36-byte block (48 with the allocator's header): 72 bytes a node. A
//! [`Uid`] keeps those 36 characters inline, 40 bytes in all, and any other UID (a test's, or
//! one some other API server writes) in a boxed `str`. It reads as a `str` either way
//! ([`Uid::as_str`], `Deref`), so it compares, hashes and prints as the text it was made from.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The length of a UUID's text form, kept inline.
const INLINE: usize = 36;

/// A UID: its text, inline when it is 36 bytes long (every UUID), else boxed. It hashes as its
/// text does, so a map keyed by UIDs is read with a `&str` ([`Borrow`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Uid(Repr);

/// One text has one form (36 bytes inline, any other length boxed): equal forms are equal texts.
#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// Exactly [`INLINE`] bytes of a `str`.
    Inline([u8; INLINE]),
    Boxed(Box<str>),
}

impl Uid {
    pub fn new(uid: &str) -> Uid {
        match <[u8; INLINE]>::try_from(uid.as_bytes()) {
            Ok(bytes) => Uid(Repr::Inline(bytes)),
            Err(_) => Uid(Repr::Boxed(uid.into())),
        }
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were a whole `str` when stored: this never falls back.
            Repr::Inline(bytes) => std::str::from_utf8(bytes).unwrap_or_default(),
            Repr::Boxed(s) => s,
        }
    }
}

impl Hash for Uid {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Borrow<str> for Uid {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Default for Uid {
    /// No UID (an object read without one): empty, no block.
    fn default() -> Self {
        Uid(Repr::Boxed(Box::default()))
    }
}

impl Deref for Uid {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Uid {
    fn from(uid: &str) -> Uid {
        Uid::new(uid)
    }
}

impl From<String> for Uid {
    fn from(uid: String) -> Uid {
        Uid::new(&uid)
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Uid {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Uid {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Uid> for String {
    fn eq(&self, other: &Uid) -> bool {
        self == other.as_str()
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_is_kept_inline_and_reads_back_as_written() {
        let text = "6f1c2a4e-9b7d-4c3e-8a21-0d5f7e9b1c33";
        let uid = Uid::from(text);
        assert!(matches!(uid.0, Repr::Inline(_)));
        assert_eq!(uid.as_str(), text);
        assert_eq!(uid.to_string(), text);
        assert_eq!(format!("{uid:?}"), format!("{text:?}"));
        let owned = String::from(text);
        assert!(uid == text);
        assert_eq!(uid, owned, "a Uid equals the String of its text");
        assert_eq!(owned, uid, "and the other way round");
        assert!(std::mem::size_of::<Uid>() <= 40, "a UID grew to {}", std::mem::size_of::<Uid>());
    }

    #[test]
    fn any_other_uid_is_kept_as_written() {
        let cases = ["", "uid-n1", "6F1C2A4E-9B7D-4C3E-8A21-0D5F7E9B1C33x", "ünïcödé-ünïcödé-ü"];
        for text in cases {
            let uid = Uid::from(text.to_string());
            assert_eq!(uid.as_str(), text);
            assert_eq!(&*uid, text);
        }
        // 36 bytes that are not a UUID are kept inline all the same, as written.
        let odd = "é".repeat(18);
        assert_eq!(Uid::new(&odd).as_str(), odd);
        assert!(matches!(Uid::new(&odd).0, Repr::Inline(_)));
        assert_eq!(Uid::default().as_str(), "");
    }

    #[test]
    fn uids_are_equal_exactly_when_their_texts_are() {
        let a = Uid::new("6f1c2a4e-9b7d-4c3e-8a21-0d5f7e9b1c33");
        let b = Uid::new("6f1c2a4e-9b7d-4c3e-8a21-0d5f7e9b1c34");
        assert_ne!(a, b);
        assert_eq!(a, a.clone());
        assert_ne!(Uid::new("uid-n1"), Uid::new("uid-n2"));
        assert_eq!(Uid::new("uid-n1"), Uid::from("uid-n1".to_string()));
    }

    #[test]
    fn a_map_keyed_by_uids_is_read_with_their_text() {
        let uuid = "6f1c2a4e-9b7d-4c3e-8a21-0d5f7e9b1c33";
        let map: std::collections::HashMap<Uid, u8> =
            [(Uid::new(uuid), 1), (Uid::new("uid-n1"), 2)].into_iter().collect();
        assert_eq!(map.get(uuid), Some(&1), "inline");
        assert_eq!(map.get("uid-n1"), Some(&2), "boxed");
        assert_eq!(map.get("uid-n2"), None);
        let set: std::collections::HashSet<Uid> = [Uid::new(uuid)].into_iter().collect();
        assert!(set.contains(uuid) && !set.contains("uid-n1"));
    }
}
