//! When the client sends a load again, and how long it waits first.
//!
//! A load is retried on what a retry can cure: no answer (a network error,
//! a timeout), a 5xx, and the 4xx that say "not now" (408, 409, 425, 429);
//! any other 4xx is the request's fault and is never sent again. Waits grow
//! exponentially with jitter (`backon`), and never end before the server's
//! `Retry-After`. Attempts and the total time are capped; past either the
//! client gives up. Every retry of one load carries the same
//! Idempotency-Key, so a load the server took before a cut connection is
//! answered from its record, not written twice.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use chrono::{DateTime, Utc};
use idem::problem::ProblemCode;

/// What an answer (or its absence) means for the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted (2xx).
    Done,
    /// Refused for what the request is (a 4xx a retry cannot cure).
    Refused,
    /// Send it again, after at least `after` when the server said so.
    Retry { after: Option<Duration> },
}

/// The verdict on an answer with `status` (`None`: no answer came) and its
/// `Retry-After` header, read at `now`.
pub fn verdict(status: Option<u16>, retry_after: Option<&str>, now: DateTime<Utc>) -> Verdict {
    let after = || retry_after.and_then(|value| parse_retry_after(value, now));
    match status {
        None => Verdict::Retry { after: None },
        Some(200..=299) => Verdict::Done,
        Some(408 | 409 | 425 | 429) | Some(500..=599) => Verdict::Retry { after: after() },
        Some(_) => Verdict::Refused,
    }
}

/// Whether a 409 is final: the load it names can no longer take the
/// request (published, abandoned, expired), the table has no partitions,
/// or a channel's offsets are of another kind, so waiting cures nothing.
/// Other 409s ("not now") stay retried.
pub fn final_conflict(status: u16, code: Option<ProblemCode>) -> bool {
    use ProblemCode::*;
    status == 409
        && matches!(
            code,
            Some(LoadNotOpen | LoadPublished | NotPartitioned | ChannelKind)
        )
}

/// A `Retry-After` value (RFC 9110): delay-seconds, or an HTTP-date (a date
/// already past means no wait). `None` for anything else.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// How often, and for how long, a load is retried.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Most attempts, the first included.
    pub max_attempts: usize,
    /// Most time from the first attempt to the start of the last.
    pub max_elapsed: Duration,
    /// The first wait; each next one about doubles, up to `max_delay`.
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            max_elapsed: Duration::from_secs(300),
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The waits before the second, third, … attempts (jittered): as many as
    /// `max_attempts` allows.
    pub fn waits(&self) -> impl Iterator<Item = Duration> {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_jitter()
            .with_max_times(self.max_attempts.saturating_sub(1))
            .build()
    }

    /// The wait before the next attempt, when one is left: the backoff's
    /// (`next`), or the server's `Retry-After` if longer; `None` when the
    /// attempts or the time (`elapsed` so far) are spent.
    pub fn next_wait(
        &self,
        next: Option<Duration>,
        retry_after: Option<Duration>,
        elapsed: Duration,
    ) -> Option<Duration> {
        let wait = next?.max(retry_after.unwrap_or(Duration::ZERO));
        (elapsed.saturating_add(wait) <= self.max_elapsed).then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn only_what_a_retry_can_cure_is_sent_again() {
        let now = at("2026-12-01T12:00:00Z");
        for status in [200, 201, 204] {
            assert_eq!(verdict(Some(status), None, now), Verdict::Done);
        }
        for status in [400, 401, 403, 404, 412, 413, 415, 422] {
            assert_eq!(
                verdict(Some(status), None, now),
                Verdict::Refused,
                "{status}"
            );
        }
        for status in [
            None,
            Some(408),
            Some(409),
            Some(425),
            Some(429),
            Some(500),
            Some(503),
        ] {
            assert!(
                matches!(verdict(status, None, now), Verdict::Retry { .. }),
                "{status:?}"
            );
        }
        assert_eq!(
            verdict(Some(503), Some("7"), now),
            Verdict::Retry {
                after: Some(Duration::from_secs(7))
            }
        );
        // A refusal's Retry-After changes nothing.
        assert_eq!(verdict(Some(422), Some("7"), now), Verdict::Refused);
        let code = |code| Some(code);
        assert!(final_conflict(409, code(ProblemCode::LoadNotOpen)));
        assert!(final_conflict(409, code(ProblemCode::LoadPublished)));
        assert!(final_conflict(409, code(ProblemCode::ChannelKind)));
        assert!(!final_conflict(
            409,
            code(ProblemCode::IdempotencyKeyInFlight)
        ));
        assert!(!final_conflict(409, None));
        assert!(!final_conflict(422, code(ProblemCode::LoadNotOpen)));
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let now = at("2026-12-01T12:00:00Z");
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Tue, 01 Dec 2026 12:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Tue, 01 Dec 2026 11:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date past is no wait"
        );
        for bad in ["", "-1", "soon", "1.5"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn waits_grow_within_their_bounds_and_end_with_the_attempts() {
        let policy = RetryPolicy {
            max_attempts: 6,
            max_elapsed: Duration::from_secs(3600),
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        let waits: Vec<Duration> = policy.waits().collect();
        assert_eq!(waits.len(), 5, "one wait before each retry");
        for wait in &waits {
            // Jitter adds up to one more delay.
            assert!(*wait >= Duration::from_millis(100), "{wait:?}");
            assert!(*wait <= Duration::from_secs(2), "{wait:?}");
        }
        assert!(waits[4] > waits[0], "{waits:?}");
    }

    #[test]
    fn the_server_may_ask_for_longer_and_time_caps_the_whole() {
        let policy = RetryPolicy {
            max_elapsed: Duration::from_secs(60),
            ..RetryPolicy::default()
        };
        let second = Duration::from_secs(1);
        assert_eq!(
            policy.next_wait(Some(second), Some(Duration::from_secs(5)), Duration::ZERO),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            policy.next_wait(Some(second), None, Duration::ZERO),
            Some(second)
        );
        assert_eq!(
            policy.next_wait(Some(second), Some(Duration::from_secs(90)), Duration::ZERO),
            None,
            "past the total time"
        );
        assert_eq!(
            policy.next_wait(None, None, Duration::ZERO),
            None,
            "no attempt left"
        );
    }
}
