//! Peer libraries run side by side with ours.
