//! Where the children of one engine's actor tree are found: by the name the supervisor gives
//! each (`<instance>-<child>`), looked up in ractor's registry (type-checked) at the moment of
//! use. A caller therefore always reaches the generation that runs now, or learns that none
//! does, without asking the supervisor: the supervisor names and restarts the children, and
//! is never in the path of a call (a tool call goes from the front-end to the gate, and from
//! the gate's per-call task to the journal, the query and the writer).

use ractor::ActorRef;

use crate::gate::GateMsg;
use crate::journal::JournalMsg;
use crate::query::QueryMsg;
use crate::supervisor::SupervisorMsg;
use crate::writer::WriterMsg;

/// The names of one engine's children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Children {
    /// The engine's instance name (`annal-<16 hex>`), which the supervisor is registered as.
    instance: std::sync::Arc<str>,
}

impl Children {
    /// The children of the engine registered as `instance`.
    pub fn new(instance: &str) -> Self {
        Self {
            instance: std::sync::Arc::from(instance),
        }
    }

    /// The registered name of the child called `child` (`keys`, `journal`, `query`, `gate`,
    /// `writer`, `ingress`).
    pub fn name(&self, child: &str) -> String {
        format!("{}-{child}", self.instance)
    }

    /// The supervisor.
    pub fn supervisor(&self) -> Option<ActorRef<SupervisorMsg>> {
        ActorRef::where_is(&*self.instance)
    }

    /// The policy gate running now.
    pub fn gate(&self) -> Option<ActorRef<GateMsg>> {
        ActorRef::where_is(self.name("gate"))
    }

    /// The journal running now.
    pub fn journal(&self) -> Option<ActorRef<JournalMsg>> {
        ActorRef::where_is(self.name("journal"))
    }

    /// The query actor running now.
    pub fn query(&self) -> Option<ActorRef<QueryMsg>> {
        ActorRef::where_is(self.name("query"))
    }

    /// The writer running now.
    pub fn writer(&self) -> Option<ActorRef<WriterMsg>> {
        ActorRef::where_is(self.name("writer"))
    }
}
