//! Reconciling by hand: what `payhook reconcile` runs. The reconciler the
//! workers run ([`crate::reconcile`]) does the same every interval, with its
//! mark and its turn; these take a window the operator chose.

use super::Admin;
use crate::backend::Backend;
use crate::error::InboxError;
use crate::reconcile::store::{self, StoreError};
use crate::reconcile::ListedEvent;

impl<DB: Backend> Admin<DB> {
    /// Of `events` (a page of the service's events list,
    /// [`EventsApi::page`](crate::reconcile::EventsApi::page)), the ones this
    /// namespace does not hold: the deliveries that were missed.
    ///
    /// # Errors
    /// A database error.
    pub async fn missing<'e>(&self, events: &'e [ListedEvent]) -> Result<Vec<&'e ListedEvent>, InboxError> {
        Ok(store::missing(&self.db, &self.namespace, events).await?)
    }

    /// Stores `events` as [`Source::Reconciled`](crate::Source::Reconciled),
    /// in one statement: they are handled when a worker of the app runs. How
    /// many were new (a delivery may have stored one meanwhile; it then
    /// stands). Every event is checked first: when one cannot be stored (an
    /// id over [`MAX_ID_BYTES`](crate::MAX_ID_BYTES), a NUL), none is.
    ///
    /// Store only events younger than the inbox's retention: an older one may
    /// have been handled and purged already, and would run again.
    ///
    /// # Errors
    /// [`InboxError::InvalidEvent`] naming the event that cannot be stored,
    /// or a database error.
    pub async fn store_reconciled(&self, events: &[&ListedEvent]) -> Result<u64, InboxError> {
        match store::store(&self.db, &self.namespace, events).await {
            Ok(stored) => Ok(stored.iter().filter(|(_, new)| *new).count() as u64),
            Err(StoreError::Unstorable(reason)) => Err(InboxError::InvalidEvent(reason)),
            Err(StoreError::Database(err)) => Err(err.into()),
        }
    }
}
