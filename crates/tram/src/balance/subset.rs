//! Subsetting: each client talks to `k` of the fleet's endpoints, chosen by
//! rendezvous hashing with a seed of its own, so that a thousand clients
//! of a thousand servers do not open a million connections, every server
//! still gets about `k / servers` of the clients, and a change to the
//! fleet moves as few clients as it can (an endpoint leaving moves only
//! its own clients; one arriving takes clients from each other equally).

use std::hash::{BuildHasher, Hasher};

/// The `k` keys of `keys` this client keeps, in their given order.
pub(crate) fn subset<'a>(keys: &[&'a str], k: usize, seed: u64) -> Vec<&'a str> {
    if keys.len() <= k {
        return keys.to_vec();
    }
    let mut ranked: Vec<(u64, &str)> = keys.iter().map(|key| (weight(seed, key), *key)).collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    let kept: std::collections::HashSet<&str> = ranked[..k].iter().map(|(_, key)| *key).collect();
    keys.iter()
        .copied()
        .filter(|key| kept.contains(key))
        .collect()
}

/// The rendezvous weight of `key` for the client seeded `seed`: any
/// well-mixed hash of the pair does (this one fixed across processes, so a
/// client's subset is reproducible from its seed).
fn weight(seed: u64, key: &str) -> u64 {
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write_u64(seed);
    h.write(key.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:7000", i / 250, i % 250))
            .collect()
    }

    #[test]
    fn keeps_k_and_spreads_clients_over_servers() {
        let servers = fleet(100);
        let keys: Vec<&str> = servers.iter().map(String::as_str).collect();
        let mut per_server = std::collections::HashMap::<&str, usize>::new();
        for client in 0..1000u64 {
            let kept = subset(&keys, 10, client.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            assert_eq!(kept.len(), 10);
            for k in kept {
                *per_server.entry(k).or_default() += 1;
            }
        }
        // 1,000 clients x 10 / 100 servers = 100 each, give or take.
        let (min, max) = (
            per_server.values().min().copied().unwrap_or(0),
            per_server.values().max().copied().unwrap_or(0),
        );
        assert!(
            per_server.len() == 100 && min > 60 && max < 140,
            "{min}..{max}"
        );
    }

    #[test]
    fn a_server_leaving_moves_only_its_own_clients() {
        let servers = fleet(50);
        let keys: Vec<&str> = servers.iter().map(String::as_str).collect();
        let before = subset(&keys, 5, 42);
        let gone = before[0];
        let after_keys: Vec<&str> = keys.iter().copied().filter(|k| *k != gone).collect();
        let after = subset(&after_keys, 5, 42);
        let kept = before.iter().filter(|k| after.contains(k)).count();
        assert_eq!(kept, 4, "{before:?} {after:?}");
    }
}
