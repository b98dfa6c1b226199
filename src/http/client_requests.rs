//! What each client holds at once (`IDEM_MAX_CONNECTIONS_PER_CLIENT`): a
//! direct client's connections, a forwarded client's requests in flight
//! (see `client_addr`, which tells who the client is).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// What each client holds at once, within this process, up to a share
/// each: a direct client's connections (counted by `app::serve` when they
/// are accepted), a forwarded client's requests in flight.
#[derive(Clone)]
pub struct PerClient {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max: usize,
}

/// One connection's or request's place; it counts until dropped.
pub struct Held {
    clients: PerClient,
    ip: IpAddr,
}

impl PerClient {
    pub fn new(max: usize) -> Self {
        PerClient {
            open: Arc::default(),
            max: max.max(1),
        }
    }

    /// A place for `ip`, or `None` when it holds its share already.
    pub fn admit(&self, ip: IpAddr) -> Option<Held> {
        let mut open = self.open.lock().expect("counts per client");
        let count = open.entry(ip).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Held {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().expect("counts per client");
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_client_holds_at_most_its_share_of_requests() {
        let requests = PerClient::new(2);
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        let first = requests.admit(ip).unwrap();
        let _second = requests.admit(ip).unwrap();
        assert!(requests.admit(ip).is_none());
        assert!(requests.admit("203.0.113.8".parse().unwrap()).is_some());
        drop(first);
        assert!(requests.admit(ip).is_some());
    }
}
