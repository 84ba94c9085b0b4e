//! The KeyCustody actor: the only holder of the namespace root key.
//!
//! Every credential-store call blocks (D-Bus round trips, kernel calls, possibly an unlock
//! prompt), so none runs on an async worker or on an embedder's blocking pool: they run one at a
//! time on a dedicated OS thread that this actor owns, which establishes its own kernel session
//! keyring first. Every call has a deadline (`KEY_CALL_DEADLINE_MS`): a Secret Service that never
//! answers is `key_unavailable`, not a hang. A thread that missed its deadline is abandoned (it
//! may still be stuck inside the store) and the next call gets a fresh thread.
//!
//! The root key never leaves this actor: callers get only the purpose keys, as
//! [`StreamKeys`]. Which key is the store's is decided by `keys::open_store_key` from the store's
//! identity and the key references its chunks name (docs/key-custody.md, "One key per store"):
//! the writer's open (`OpenWriter`, under the writer lock) opens it for writing (making the
//! store's id if its sidecar predates ids, claiming, and creating a key at an enable); the
//! readers' opens (`Open`: the gate, queries) only read. The store's seal checkpoint, a
//! credential named by the namespace and the store's id, is kept through this actor too
//! (`CredentialCheckpoints` on the same thread), so no credential-store call of the engine runs
//! anywhere else.

use std::sync::Arc;
use std::time::Duration;

use annal_engine::keys::{
    HistoryKeys, JournalKeys, KeyChoice, KeyCustody, KeyError, KeyProvider, KeyReference,
    Namespace, OpenMode, SessionIdKey, StoreId, open_store_key,
};
use annal_engine::seal::{
    Checkpoint, CheckpointError, CheckpointStore, CredentialCheckpoints, Reconciled,
};
use annal_engine::storage::StoreLayout;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

/// Longest one credential-store call may take before it is reported `key_unavailable`, in
/// milliseconds. Generous, because an unlock prompt may be on screen; bounded, because a store
/// that never answers must not stall enable or shutdown.
pub const KEY_CALL_DEADLINE_MS: u64 = 10_000;

/// The purpose keys of one namespace, handed to the writer. Never the root key.
#[derive(Clone)]
pub struct StreamKeys {
    /// Seals and opens history chunks.
    pub history: HistoryKeys,
    /// Seals and opens journal chunks.
    pub journal: JournalKeys,
    /// Turns raw session labels into keyed session ids.
    pub session: Arc<SessionIdKey>,
    /// Encrypts and opens the derived index files.
    pub index: Arc<annal_engine::index::IndexKey>,
    /// Authenticates chunk seals.
    pub seal: Arc<annal_engine::seal::SealKey>,
    /// Seals paging cursors.
    pub cursor: Arc<annal_engine::policy::cursor::CursorKey>,
    /// The reference the key is stored under (written into chunk headers).
    pub reference: KeyReference,
}

impl std::fmt::Debug for StreamKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamKeys")
            .field("reference", &self.reference)
            .finish_non_exhaustive()
    }
}

/// What the actor can be asked.
pub enum KeyCustodyMsg {
    /// Load the store's key for reading (the gate, queries): nothing is created, claimed or
    /// written. Replies with the purpose keys.
    Open {
        /// Ignored for reads (kept so the readers' calls need no change); see `OpenWriter`.
        create: bool,
        /// Where the keys (or the failure, with its fixed category) go.
        reply: RpcReplyPort<Result<StreamKeys, KeyError>>,
    },
    /// Load the store's key for its writer, which holds the writer lock: a sidecar without an
    /// id gets one, an unowned reference-named key the chunks name is claimed, and when
    /// `create` (enable) a store without a key gets one. Replies with the purpose keys.
    OpenWriter {
        /// Whether a missing key may be created.
        create: bool,
        /// Where the keys (or the failure, with its fixed category) go.
        reply: RpcReplyPort<Result<StreamKeys, KeyError>>,
    },
    /// Store the checkpoint of a seal just made durable (never moving it back or sideways:
    /// `CheckpointStore::store`).
    StoreCheckpoint {
        /// The seal's checkpoint.
        checkpoint: Checkpoint,
        /// Where the outcome goes.
        reply: RpcReplyPort<Result<(), CheckpointError>>,
    },
    /// Compare the checkpoint with the seal chain on disk and bring it up to the chain's newest
    /// seal, unless the chain is older (`seal::reconcile`): a writer's first checkpoint call
    /// of its life.
    ReconcileCheckpoint {
        /// The checkpoints of every verified seal on disk.
        chain: Vec<Checkpoint>,
        /// Where the outcome goes.
        reply: RpcReplyPort<Result<Reconciled, CheckpointError>>,
    },
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
}

/// A job for the key thread.
type KeyJob = Box<dyn FnOnce(&dyn KeyProvider) + Send>;

/// The dedicated thread credential-store calls run on.
struct KeyThread {
    /// Sends jobs to the thread; dropping it ends the thread once its current job returns.
    jobs: std::sync::mpsc::Sender<KeyJob>,
}

impl KeyThread {
    fn spawn(provider: Arc<dyn KeyProvider>) -> Result<Self, KeyError> {
        let (jobs, inbox) = std::sync::mpsc::channel::<KeyJob>();
        std::thread::Builder::new()
            .name("annal-key-custody".into())
            .spawn(move || {
                // Its own kernel session keyring, so the keyutils store works here whatever the
                // embedder's threads look like (a no-op when the process already has one).
                let _ = annal_engine::keys::establish_session_keyring();
                while let Ok(job) = inbox.recv() {
                    job(provider.as_ref());
                }
            })
            .map_err(|e| KeyError::StoreUnavailable {
                detail: format!("cannot start the key thread: {e}"),
            })?;
        Ok(Self { jobs })
    }
}

/// The actor's state.
pub struct KeyCustodyState {
    /// The credential store.
    provider: Arc<dyn KeyProvider>,
    /// The namespace whose key this actor holds.
    namespace: Namespace,
    /// The store the key is for (its id and chunk headers decide which key).
    layout: StoreLayout,
    /// Which key a store without chunks takes at enable.
    key_choice: KeyChoice,
    /// The store's id, once the key is open (`None` for a store without one: its checkpoint
    /// has the legacy per-namespace name).
    store_id: Option<StoreId>,
    /// Whether the writer's open ran (a read's open is redone for the writer once).
    opened_for_writer: bool,
    /// The thread calls run on; replaced when a call misses its deadline.
    thread: Option<KeyThread>,
    /// The custody of the loaded key, once loaded.
    custody: Option<Arc<KeyCustody>>,
    /// The deadline of each call.
    deadline: Duration,
}

/// The KeyCustody actor.
pub struct KeyCustodyActor;

/// What the actor starts with.
pub struct KeyCustodyArgs {
    /// The credential store.
    pub provider: Arc<dyn KeyProvider>,
    /// The namespace.
    pub namespace: Namespace,
    /// The store.
    pub layout: StoreLayout,
    /// Which key a store without chunks takes at enable.
    pub key_choice: KeyChoice,
    /// The per-call deadline.
    pub deadline: Duration,
}

impl KeyCustodyState {
    /// Runs `call` on the key thread with the deadline. A missed deadline abandons the thread.
    async fn run<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&dyn KeyProvider) -> Result<T, KeyError> + Send + 'static,
    ) -> Result<T, KeyError> {
        self.run_on_thread(call).await?
    }

    /// Runs a checkpoint call on the key thread with the deadline; the thread's own failures
    /// (it ended, the deadline passed) are the credential store's.
    async fn run_checkpoint<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&dyn CheckpointStore) -> Result<T, CheckpointError> + Send + 'static,
    ) -> Result<T, CheckpointError> {
        let namespace = self.namespace.clone();
        let store = self.store_id;
        self.run_on_thread(move |provider| {
            call(&CredentialCheckpoints::new(
                provider,
                &namespace,
                store.as_ref(),
            ))
        })
        .await
        .map_err(|source| CheckpointError::Credential { source })?
    }

    /// Runs `call` on the key thread and waits for its answer at most the deadline; the error
    /// is the thread's (it could not start, it ended, the deadline passed), never the call's.
    async fn run_on_thread<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&dyn KeyProvider) -> T + Send + 'static,
    ) -> Result<T, KeyError> {
        if self.thread.is_none() {
            self.thread = Some(KeyThread::spawn(Arc::clone(&self.provider))?);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: KeyJob = Box::new(move |provider| {
            let _ = tx.send(call(provider));
        });
        let sent = self
            .thread
            .as_ref()
            .map(|t| t.jobs.send(job).is_ok())
            .unwrap_or(false);
        if !sent {
            self.thread = None;
            return Err(KeyError::StoreUnavailable {
                detail: "the key thread ended".into(),
            });
        }
        match tokio::time::timeout(self.deadline, rx).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(_)) => {
                self.thread = None;
                Err(KeyError::StoreUnavailable {
                    detail: "the key thread ended during a call".into(),
                })
            }
            Err(_) => {
                // The store may still be stuck inside this thread; never wait on it again.
                self.thread = None;
                Err(KeyError::StoreTimedOut {
                    timeout_ms: annal_engine::clock::millis(self.deadline),
                })
            }
        }
    }
}

/// The purpose keys a custody hands out.
fn stream_keys(custody: Arc<KeyCustody>) -> StreamKeys {
    StreamKeys {
        history: custody.history_keys(),
        journal: custody.journal_keys(),
        session: Arc::new(custody.session_id_key()),
        index: Arc::new(annal_engine::index::IndexKey::from(&custody.index_key())),
        seal: Arc::new(annal_engine::seal::SealKey::from_custody(&custody)),
        cursor: Arc::new(annal_engine::policy::cursor::CursorKey::new(
            &custody.cursor_key(),
        )),
        reference: custody.reference().clone(),
    }
}

impl KeyCustodyState {
    /// The store's key: the one already open, unless this is the writer's first open after a
    /// read's (the writer's open makes the id and claims, `open_for_store`).
    async fn open(&mut self, writer: bool, create: bool) -> Result<Arc<KeyCustody>, KeyError> {
        let reuse = self
            .custody
            .as_ref()
            .filter(|_| !writer || self.opened_for_writer);
        if let Some(custody) = reuse {
            return Ok(Arc::clone(custody));
        }
        let namespace = self.namespace.clone();
        let layout = self.layout.clone();
        let choice = self.key_choice;
        let (custody, store_id) = self
            .run(move |provider| {
                open_for_store(provider, &namespace, &layout, writer, create, choice)
            })
            .await?;
        let custody = Arc::new(custody);
        self.custody = Some(Arc::clone(&custody));
        self.store_id = store_id;
        self.opened_for_writer |= writer;
        Ok(custody)
    }
}

/// Opens the key of the store at `layout` (`keys::open_store_key`): for its writer (under the
/// writer lock: a sidecar without an id gets one first; a key is made only when `create`), or
/// read-only. Returns the custody and the store's id.
fn open_for_store(
    provider: &dyn KeyProvider,
    namespace: &Namespace,
    layout: &StoreLayout,
    writer: bool,
    create: bool,
    choice: KeyChoice,
) -> Result<(KeyCustody, Option<StoreId>), KeyError> {
    let store_failure = |e: annal_engine::store::StoreIdError| KeyError::StoreUnavailable {
        detail: format!("the store's identity: {e}"),
    };
    let mut choice = choice;
    if writer && let Some(sidecar) = layout.sidecar() {
        annal_engine::store::ensure_store_id(sidecar, &mut annal_engine::entropy::OsEntropy)
            .map_err(store_failure)?;
        // The owner told this store to take a key of its own (`annal enable --own-key`).
        if annal_engine::store::recorded_key_choice(sidecar).map_err(store_failure)?
            == KeyChoice::Own
        {
            choice = KeyChoice::Own;
        }
    }
    let scope = annal_engine::store::key_scope(layout).map_err(store_failure)?;
    let mode = if writer {
        OpenMode::Write { create, choice }
    } else {
        OpenMode::Read
    };
    let custody = open_store_key(provider, namespace, &scope, mode)?;
    Ok((custody, scope.id))
}

impl Actor for KeyCustodyActor {
    type Msg = KeyCustodyMsg;
    type State = KeyCustodyState;
    type Arguments = KeyCustodyArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: KeyCustodyArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(KeyCustodyState {
            provider: args.provider,
            namespace: args.namespace,
            layout: args.layout,
            key_choice: args.key_choice,
            store_id: None,
            opened_for_writer: false,
            thread: None,
            custody: None,
            deadline: args.deadline,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            #[cfg(feature = "testing")]
            KeyCustodyMsg::InjectPanic => panic!("injected key custody panic (test)"),
            KeyCustodyMsg::Open { create: _, reply } => {
                let result = state.open(false, false).await;
                let _ = reply.send(result.map(stream_keys));
            }
            KeyCustodyMsg::OpenWriter { create, reply } => {
                let result = state.open(true, create).await;
                let _ = reply.send(result.map(stream_keys));
            }
            KeyCustodyMsg::StoreCheckpoint { checkpoint, reply } => {
                let stored = state
                    .run_checkpoint(move |checkpoints| checkpoints.store(&checkpoint))
                    .await;
                let _ = reply.send(stored);
            }
            KeyCustodyMsg::ReconcileCheckpoint { chain, reply } => {
                let reconciled = state
                    .run_checkpoint(move |checkpoints| {
                        annal_engine::seal::reconcile(checkpoints, &chain)
                    })
                    .await;
                let _ = reply.send(reconciled);
            }
        }
        Ok(())
    }
}
