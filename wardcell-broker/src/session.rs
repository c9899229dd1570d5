//! One supervisor connection's states, as docs/PROTOCOL.md 6.3 gives them: what the
//! caller may send in each, and where the broker's own steps lead. A message the caller
//! sends where it is not expected is fatal to that connection: it is closed (and, while
//! an entered sandbox runs, that sandbox is ended).

/// Where a connection is (PROTOCOL 6.3, broker side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Accepted while fewer than 4 connections are served: the peer check comes first.
    Accepted,
    /// Accepted as the fifth: the peer check, then `Hello` and `Refused`; nothing read.
    Busy,
    /// The peer is verified and the broker's `Hello` is sent: the caller's `Hello` next.
    Handshake,
    /// One `ZoneRequest` next.
    Request,
    /// After `Enter`: the `'F'` message with the caller's descriptors next.
    Descriptors,
    /// The stdio check and the decision: nothing is read.
    Deciding,
    /// Admitted: the sandbox is being built; nothing is read.
    Starting,
    /// `Started` was sent: the caller must stay silent until the sandbox ends.
    Running,
    /// Answered (`Zones`, `Rules`, `Refused`, `Exited`, `Failed`): closed.
    Done,
}

/// What happens on a connection: the caller's messages, and the broker's own steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    // The caller's.
    Hello,
    List,
    Why,
    Enter,
    Descriptors,
    /// Any byte, end of file or error on the connection.
    Spoke,
    // The broker's.
    PeerVerified,
    Refused,
    Admitted,
    Started,
    StartFailed,
    Ended,
}

impl Event {
    /// Whether the caller sent it (else the broker did it).
    fn by_caller(self) -> bool {
        use Event as E;
        matches!(
            self,
            E::Hello | E::List | E::Why | E::Enter | E::Descriptors | E::Spoke
        )
    }
}

/// The state table: where `event` leads from `state`, or `None` when it is not expected
/// there (a caller's message then closes the connection).
pub fn next(state: State, event: Event) -> Option<State> {
    use Event as E;
    use State as S;
    Some(match (state, event) {
        (S::Accepted, E::PeerVerified) => S::Handshake,
        (S::Busy, E::PeerVerified) => S::Done,
        (S::Handshake, E::Hello) => S::Request,
        (S::Request, E::List | E::Why) => S::Done,
        (S::Request, E::Enter) => S::Descriptors,
        (S::Descriptors, E::Descriptors) => S::Deciding,
        (S::Deciding, E::Refused) => S::Done,
        (S::Deciding, E::Admitted) => S::Starting,
        (S::Starting, E::StartFailed) => S::Done,
        (S::Starting, E::Started) => S::Running,
        (S::Running, E::Ended) => S::Done,
        _ => return None,
    })
}

/// One connection's place in the table.
#[derive(Debug)]
pub struct Session(State);

impl Session {
    pub fn new(busy: bool) -> Session {
        Session(if busy { State::Busy } else { State::Accepted })
    }

    /// Take `event`; `Err` names what came out of turn, and the connection is closed.
    pub fn on(&mut self, event: Event) -> Result<(), String> {
        let Some(next) = next(self.0, event) else {
            let who = match event.by_caller() {
                true => "the caller sent",
                false => "the supervisor did",
            };
            return Err(format!("{who} {event:?} out of turn (state {:?})", self.0));
        };
        self.0 = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event as E;
    use State as S;

    const STATES: [State; 9] = [
        S::Accepted,
        S::Busy,
        S::Handshake,
        S::Request,
        S::Descriptors,
        S::Deciding,
        S::Starting,
        S::Running,
        S::Done,
    ];
    const EVENTS: [Event; 12] = [
        E::Hello,
        E::List,
        E::Why,
        E::Enter,
        E::Descriptors,
        E::Spoke,
        E::PeerVerified,
        E::Refused,
        E::Admitted,
        E::Started,
        E::StartFailed,
        E::Ended,
    ];

    /// Every transition PROTOCOL 6.3 has, and nothing else: each (state, event) pair
    /// not listed is refused.
    #[test]
    fn the_table_is_protocol_6_3() {
        let allowed = [
            (S::Accepted, E::PeerVerified, S::Handshake),
            (S::Busy, E::PeerVerified, S::Done),
            (S::Handshake, E::Hello, S::Request),
            (S::Request, E::List, S::Done),
            (S::Request, E::Why, S::Done),
            (S::Request, E::Enter, S::Descriptors),
            (S::Descriptors, E::Descriptors, S::Deciding),
            (S::Deciding, E::Refused, S::Done),
            (S::Deciding, E::Admitted, S::Starting),
            (S::Starting, E::StartFailed, S::Done),
            (S::Starting, E::Started, S::Running),
            (S::Running, E::Ended, S::Done),
        ];
        for s in STATES {
            for e in EVENTS {
                let want = allowed
                    .iter()
                    .find(|(from, on, _)| *from == s && *on == e)
                    .map(|t| t.2);
                assert_eq!(next(s, e), want, "{s:?} on {e:?}");
            }
        }
    }

    #[test]
    fn an_entry_runs_through_in_order() {
        let mut c = Session::new(false);
        for e in [
            E::PeerVerified,
            E::Hello,
            E::Enter,
            E::Descriptors,
            E::Admitted,
            E::Started,
            E::Ended,
        ] {
            c.on(e).unwrap();
        }
        assert_eq!(c.0, S::Done);
    }

    #[test]
    fn a_caller_message_out_of_turn_is_fatal_and_says_so() {
        // A request before the Hello.
        let mut c = Session::new(false);
        c.on(E::PeerVerified).unwrap();
        let e = c.on(E::Enter).unwrap_err();
        assert!(e.contains("the caller sent Enter out of turn"), "{e}");
        // Anything the caller sends while its entered sandbox runs.
        let mut c = Session(S::Running);
        assert!(c.on(E::Spoke).is_err());
        // A second request after the first was answered.
        let mut c = Session(S::Done);
        assert!(c.on(E::List).is_err());
        // Nothing is read from the fifth connection.
        let mut c = Session::new(true);
        assert!(c.on(E::Hello).is_err());
        c.on(E::PeerVerified).unwrap();
        assert_eq!(c.0, S::Done);
        // A decision before the descriptors arrived is the supervisor's own error.
        let mut c = Session(S::Descriptors);
        let e = c.on(E::Admitted).unwrap_err();
        assert!(e.contains("the supervisor did Admitted"), "{e}");
    }
}
