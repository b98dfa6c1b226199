//! What this process knows of the announced loads (`load_events`): the
//! last position it heard of, which wakes its event streams, and how many
//! streams each token holds open here.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::ids::Principal;

/// What this process knows of the announced loads: the last position it
/// heard of, and the streams open per token.
pub struct LoadEvents {
    last: watch::Sender<i64>,
    open: Mutex<HashMap<Principal, usize>>,
}

impl Default for LoadEvents {
    fn default() -> Self {
        LoadEvents {
            last: watch::channel(0).0,
            open: Mutex::default(),
        }
    }
}

impl LoadEvents {
    /// Wakes the streams when `position` is new to this process.
    pub fn heard(&self, position: i64) {
        self.last.send_if_modified(|last| {
            let newer = position > *last;
            if newer {
                *last = position;
            }
            newer
        });
    }

    /// A receiver that changes when a new position is heard of.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.last.subscribe()
    }

    /// Counts a stream of `principal`'s opened; false (nothing counted)
    /// when it holds `most` already.
    pub fn open_stream(&self, principal: &Principal, most: usize) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(principal.clone()).or_default();
        if *count >= most {
            return false;
        }
        *count += 1;
        true
    }

    /// Counts a stream of `principal`'s closed.
    pub fn close_stream(&self, principal: &Principal) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(principal);
            }
        }
    }
}
