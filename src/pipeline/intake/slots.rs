//! Turns to write (load slots), fairly shared: a write holds one while it
//! holds database connections, and one principal (a token) holds at most
//! its share of this process's turns, so that however many writes one
//! token sends, the others always find a turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::ids::Principal;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant};

/// Each principal's turns, by principal: only those that hold or await one.
type Shares = Arc<Mutex<HashMap<Principal, Arc<Semaphore>>>>;

/// This process's turns to write and each principal's share of them.
pub struct LoadSlots {
    all: Arc<Semaphore>,
    share: usize,
    shares: Shares,
}

/// Why a write found no turn within its wait.
#[derive(Debug, PartialEq, Eq)]
pub enum NoSlot {
    /// Its principal's writes hold all of its share.
    ShareTaken,
    /// Every turn of the process is taken.
    AllTaken,
}

/// A turn to write: one of the process's and one of each principal's it
/// counts toward, all given back when it is dropped.
pub struct LoadSlot {
    own: Vec<(Principal, OwnedSemaphorePermit)>,
    all: Option<OwnedSemaphorePermit>,
    shares: Shares,
}

impl LoadSlots {
    /// `total` turns, of which one principal holds at most `share` (at
    /// least 1, at most `total`).
    pub fn new(total: usize, share: usize) -> LoadSlots {
        let total = total.max(1);
        LoadSlots {
            all: Arc::new(Semaphore::new(total)),
            share: share.clamp(1, total),
            shares: Arc::default(),
        }
    }

    /// Turns not taken.
    pub fn available(&self) -> usize {
        self.all.available_permits()
    }

    /// A turn counted toward each of `principals` (a batch of several
    /// tokens' POSTs counts toward each of them), waited for until `wait`
    /// has passed. The principal's own turn comes first, so a write over
    /// its share waits holding none of the process's turns.
    pub async fn acquire(
        &self,
        principals: &[&Principal],
        wait: Duration,
    ) -> Result<LoadSlot, NoSlot> {
        let deadline = Instant::now() + wait;
        // Always in the same order, so that two batches never wait on each other.
        let mut names = principals.to_vec();
        names.sort_unstable();
        names.dedup();
        let mut slot = LoadSlot {
            own: Vec::with_capacity(names.len()),
            all: None,
            shares: self.shares.clone(),
        };
        for name in names {
            let own = self.share_of(name);
            match timeout_at(deadline, own.acquire_owned()).await {
                Ok(Ok(permit)) => slot.own.push((name.clone(), permit)),
                // Dropping `slot` gives back what it took, and forgets `name` if idle.
                Ok(Err(_)) | Err(_) => return Err(NoSlot::ShareTaken),
            }
        }
        match timeout_at(deadline, self.all.clone().acquire_owned()).await {
            Ok(Ok(permit)) => {
                slot.all = Some(permit);
                Ok(slot)
            }
            Ok(Err(_)) | Err(_) => Err(NoSlot::AllTaken),
        }
    }

    /// `principal`'s turns, made when it has none yet.
    fn share_of(&self, principal: &Principal) -> Arc<Semaphore> {
        lock(&self.shares)
            .entry(principal.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }

    #[cfg(test)]
    fn principals_known(&self) -> usize {
        lock(&self.shares).len()
    }
}

impl Drop for LoadSlot {
    fn drop(&mut self) {
        self.all.take();
        let own = std::mem::take(&mut self.own);
        let mut shares = lock(&self.shares);
        for (name, permit) in own {
            drop(permit);
            // Every holder and waiter keeps a reference, and a new one is
            // only had under this lock: the map's alone means idle.
            if shares.get(&name).is_some_and(|s| Arc::strong_count(s) == 1) {
                shares.remove(&name);
            }
        }
    }
}

fn lock(shares: &Shares) -> MutexGuard<'_, HashMap<Principal, Arc<Semaphore>>> {
    // The map is consistent between statements: a panic cannot leave it half-changed.
    shares.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TokenId;

    /// A principal of its own for each name.
    fn p(name: &str) -> Principal {
        let n = name.bytes().fold(0u128, |n, b| n << 8 | u128::from(b));
        Principal::Token(TokenId::from_uuid(uuid::Uuid::from_u128(n)))
    }

    const SHORT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_principal_holds_at_most_its_share_and_another_still_finds_a_turn() {
        let slots = LoadSlots::new(4, 2);
        let _a1 = slots.acquire(&[&p("a")], SHORT).await.unwrap();
        let _a2 = slots.acquire(&[&p("a")], SHORT).await.unwrap();
        assert_eq!(
            slots.acquire(&[&p("a")], SHORT).await.err(),
            Some(NoSlot::ShareTaken)
        );
        let _b1 = slots.acquire(&[&p("b")], SHORT).await.unwrap();
        let _b2 = slots.acquire(&[&p("b")], SHORT).await.unwrap();
        assert_eq!(
            slots.acquire(&[&p("c")], SHORT).await.err(),
            Some(NoSlot::AllTaken)
        );
        assert_eq!(slots.available(), 0);
    }

    #[tokio::test]
    async fn a_principal_over_its_share_gets_the_turn_one_of_its_own_writes_gives_back() {
        let slots = Arc::new(LoadSlots::new(4, 1));
        let first = slots.acquire(&[&p("a")], SHORT).await.unwrap();
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move {
                slots
                    .acquire(&[&p("a")], Duration::from_secs(5))
                    .await
                    .map(|_| ())
            })
        };
        tokio::time::sleep(SHORT).await;
        assert_eq!(slots.available(), 3, "the waiting write holds no turn");
        drop(first);
        assert_eq!(waiting.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn turns_given_back_leave_no_principal_behind() {
        let slots = LoadSlots::new(2, 1);
        let a = slots.acquire(&[&p("a")], SHORT).await.unwrap();
        assert!(slots.acquire(&[&p("a")], SHORT).await.is_err());
        let batch = slots
            .acquire(&[&p("c"), &p("b"), &p("c")], SHORT)
            .await
            .unwrap();
        assert_eq!(slots.principals_known(), 3);
        assert_eq!(
            slots.acquire(&[&p("d")], SHORT).await.err(),
            Some(NoSlot::AllTaken)
        );
        drop((a, batch));
        assert_eq!(slots.principals_known(), 0);
        assert_eq!(slots.available(), 2);
    }

    #[test]
    fn a_share_is_at_least_one_turn_and_at_most_all_of_them() {
        assert_eq!(LoadSlots::new(4, 0).share, 1);
        assert_eq!(LoadSlots::new(4, 9).share, 4);
        assert_eq!(LoadSlots::new(0, 0).share, 1);
    }
}
