//! The `kube-remediator` binary: a thin shell over [`kube_remediator::cli`].

fn main() -> std::process::ExitCode {
    kube_remediator::cli::main()
}
