//! Compiles the `.proto` files of `proto/` with protox, in pure Rust: no `protoc` is needed to
//! build bcd. The kubelet's gRPC APIs: the device plugin API gets a server (bcd serves it) and a
//! client (the tests and the benchmark speak it); Registration and PodResources a client and a
//! server (bcd calls them; the stand-in kubelet of the Rust tests serves them). The DRA plugin,
//! plugin registration and DRA health APIs get a server (bcd serves them) and a client (the
//! tests speak them). The OTLP metrics messages the exporter sends
//! (`proto/otlp/v1/metrics.proto`) have no service: they become prost messages only.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/deviceplugin/v1beta1/api.proto",
        "proto/podresources/v1/api.proto",
        "proto/dra/v1/api.proto",
        "proto/dra/v1beta1/api.proto",
        "proto/pluginregistration/v1/api.proto",
        "proto/dra_health/v1alpha1/api.proto",
        "proto/otlp/v1/metrics.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let files = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(files)?;
    Ok(())
}
