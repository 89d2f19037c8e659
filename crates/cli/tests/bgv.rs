//! `hecloud keygen/encrypt/decrypt` with a BGV key folder: keys written
//! (the secret 0600), comma-separated integers below t encrypted and
//! decrypted back, values that do not fit refused.

use std::process::Command;

fn hecloud(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hecloud"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bgv_integers_round_trip_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("bk");
    let k = keys.to_str().unwrap();
    let out = hecloud(&["keygen", "--dir", k, "--preset", "bgv-n13"]);
    assert!(out.status.success(), "{out:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(keys.join("secret.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let mut rng = hecloud_math::testing::rng();
    let values: Vec<u64> = (0..20)
        .map(|_| rand_core::RngCore::next_u64(&mut rng) % 65537)
        .collect();
    let text: Vec<String> = values.iter().map(u64::to_string).collect();
    let input = dir.path().join("x.txt");
    std::fs::write(&input, text.join(",")).unwrap();
    let ct = dir.path().join("x.ct");
    let out = hecloud(&[
        "encrypt",
        "--keys",
        k,
        input.to_str().unwrap(),
        "-o",
        ct.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let out = hecloud(&[
        "decrypt",
        "--keys",
        k,
        ct.to_str().unwrap(),
        "--count",
        "20",
    ]);
    assert!(out.status.success(), "{out:?}");
    let back: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(back, values);
    // A value that does not fit t, and a word that is no integer.
    for bad in ["65537", "1,-2", "3.5"] {
        std::fs::write(&input, bad).unwrap();
        let out = hecloud(&[
            "encrypt",
            "--keys",
            k,
            input.to_str().unwrap(),
            "-o",
            ct.to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "{bad}");
    }
    // An unknown BGV preset is named as such.
    let out = hecloud(&["keygen", "--dir", k, "--preset", "bgv-n12"]);
    assert!(!out.status.success());
}

/// `keygen --bits-in-slots` writes the right-rotation keys;
/// `encrypt/decrypt --bits-in-slots --width W` round-trip one integer
/// (0, 2^W − 1, a random one; W = 2 and 100); too wide a value, two
/// values, or a folder that is not BGV are refused.
#[test]
fn bits_in_slots_round_trip_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("bits");
    let k = keys.to_str().unwrap();
    let out = hecloud(&[
        "keygen",
        "--dir",
        k,
        "--preset",
        "bgv-n13",
        "--bits-in-slots",
    ]);
    assert!(out.status.success(), "{out:?}");
    let galois = std::fs::read_dir(&keys)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("galois-"))
        .count();
    assert_eq!(galois, 12, "right by 1, 2, …, 2^11");
    let mut rng = hecloud_math::testing::rng();
    let random = rand_core::RngCore::next_u64(&mut rng).to_string();
    let (input, ct) = (dir.path().join("x.txt"), dir.path().join("x.ct"));
    let (i, c) = (input.to_str().unwrap(), ct.to_str().unwrap());
    let top100 = ((num_bigint::BigUint::from(1u8) << 100u32) - 1u8).to_string();
    for (value, width) in [
        ("0", "2"),
        ("3", "2"),
        (random.as_str(), "100"),
        (top100.as_str(), "100"),
    ] {
        std::fs::write(&input, value).unwrap();
        let args = ["--keys", k, "--bits-in-slots", "--width", width];
        let out = hecloud(&[&["encrypt", i, "-o", c][..], &args].concat());
        assert!(out.status.success(), "{out:?}");
        let out = hecloud(&[&["decrypt", c][..], &args].concat());
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), value);
    }
    for bad in ["4", "1,2", "x"] {
        std::fs::write(&input, bad).unwrap();
        let out = hecloud(&[
            "encrypt",
            i,
            "-o",
            c,
            "--keys",
            k,
            "--bits-in-slots",
            "--width",
            "2",
        ]);
        assert!(!out.status.success(), "{bad}");
    }
    let out = hecloud(&[
        "keygen",
        "--dir",
        dir.path().join("c").to_str().unwrap(),
        "--preset",
        "n13",
        "--bits-in-slots",
    ]);
    assert!(!out.status.success());
}
