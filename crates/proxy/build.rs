//! Compiles `proto/proxy.proto` into Rust (prost messages, tonic client and
//! server) with `protox`, a pure-Rust protobuf compiler: no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/proxy.proto");
    let fds = protox::compile(["proto/proxy.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
