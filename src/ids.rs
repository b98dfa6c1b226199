//! What loads, tokens and callers are known by: `LoadId`, `TokenId` and
//! `Principal`, each its own type so that one cannot be passed for another.
//! A load id and a token id are UUIDs on the wire and in Postgres
//! (`uuid` columns); a principal is text (`text` columns): a token's id,
//! `admin`, `anonymous` or `local-scraper`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Declares a UUID newtype that reads and writes as its UUID everywhere.
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            Serialize, Deserialize, sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A new id: a UUIDv7, so ids sort by when they were made.
            pub fn new() -> $name {
                $name(Uuid::now_v7())
            }

            /// The id a UUID already names (`From<Uuid>`, usable in a `const`).
            pub const fn from_uuid(uuid: Uuid) -> $name {
                $name(uuid)
            }

            pub fn as_uuid(&self) -> Uuid {
                self.0
            }

            /// Its 16 bytes, as binary COPY and hashes take them.
            pub fn as_bytes(&self) -> &[u8; 16] {
                self.0.as_bytes()
            }
        }

        impl Default for $name {
            fn default() -> $name {
                $name::new()
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> $name {
                $name(uuid)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<$name, uuid::Error> {
                Uuid::parse_str(text).map($name)
            }
        }
    };
}

uuid_id!(
    /// A load: one write's entry in the ledger, and the `_load_id` of the
    /// rows it wrote.
    LoadId
);

uuid_id!(
    /// A bearer token (not its secret).
    TokenId
);

impl LoadId {
    /// The load of no request: what a partition dropped by `DELETE
    /// /partitions` records its removals under.
    pub const NONE: LoadId = LoadId(Uuid::nil());
}

/// Who a request acts for: idempotency keys, channels and load slots are
/// kept apart per principal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Principal {
    Token(TokenId),
    /// The admin token of the configuration (`IDEM_ADMIN_TOKEN`).
    Admin,
    /// A caller when idem runs without tokens.
    Anonymous,
    /// A metrics scrape from the local machine, without a token.
    LocalScraper,
    /// idem itself, for work no request asked for (an expire round).
    Idem,
}

impl Principal {
    const ADMIN: &'static str = "admin";
    const ANONYMOUS: &'static str = "anonymous";
    const LOCAL_SCRAPER: &'static str = "local-scraper";
    const IDEM: &'static str = "idem";

    pub fn token_id(&self) -> Option<TokenId> {
        match self {
            Principal::Token(id) => Some(*id),
            _ => None,
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Token(id) => id.fmt(f),
            Principal::Admin => f.write_str(Principal::ADMIN),
            Principal::Anonymous => f.write_str(Principal::ANONYMOUS),
            Principal::LocalScraper => f.write_str(Principal::LOCAL_SCRAPER),
            Principal::Idem => f.write_str(Principal::IDEM),
        }
    }
}

/// Text that names no principal.
#[derive(Debug, PartialEq, Eq)]
pub struct NotAPrincipal;

impl FromStr for Principal {
    type Err = NotAPrincipal;

    fn from_str(text: &str) -> Result<Principal, NotAPrincipal> {
        match text {
            Principal::ADMIN => Ok(Principal::Admin),
            Principal::ANONYMOUS => Ok(Principal::Anonymous),
            Principal::LOCAL_SCRAPER => Ok(Principal::LocalScraper),
            Principal::IDEM => Ok(Principal::Idem),
            _ => text
                .parse()
                .map(Principal::Token)
                .map_err(|_| NotAPrincipal),
        }
    }
}

impl Serialize for Principal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a principal")))
    }
}

impl sqlx::Type<sqlx::Postgres> for Principal {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl sqlx::postgres::PgHasArrayType for Principal {
    fn array_type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::postgres::PgHasArrayType>::array_type_info()
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for Principal {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <String as sqlx::Encode<sqlx::Postgres>>::encode(self.to_string(), buf)
    }
}

impl sqlx::Decode<'_, sqlx::Postgres> for Principal {
    fn decode(value: sqlx::postgres::PgValueRef<'_>) -> Result<Self, sqlx::error::BoxDynError> {
        let text = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(text
            .parse()
            .map_err(|_| format!("{text:?} is not a principal"))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_reads_back_as_it_is_written() {
        let token = Principal::Token(TokenId::new());
        for principal in [
            token,
            Principal::Admin,
            Principal::Anonymous,
            Principal::LocalScraper,
            Principal::Idem,
        ] {
            assert_eq!(principal.to_string().parse(), Ok(principal.clone()));
            let json = serde_json::to_string(&principal).unwrap();
            assert_eq!(serde_json::from_str::<Principal>(&json).unwrap(), principal);
        }
        assert_eq!("someone".parse::<Principal>(), Err(NotAPrincipal));
    }

    #[test]
    fn ids_are_their_uuids_on_the_wire() {
        let id = LoadId::new();
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            format!("\"{}\"", id.as_uuid())
        );
        assert_eq!(id.to_string().parse::<LoadId>().unwrap(), id);
    }
}
