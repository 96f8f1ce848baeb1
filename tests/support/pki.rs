//! A throw-away PKI for the test control plane: one CA, one serving certificate for the API
//! server (127.0.0.1 and localhost), one admin client certificate (system:masters) shared by
//! every component, and the service-account signing key.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The tests' own user name (client certificate CN).
pub const ADMIN_USER: &str = "kube-remediator-test-admin";
/// The operator's user name in the tests.
pub const OPERATOR_USER: &str = "kube-remediator-e2e";

/// Paths of the files written by [`Pki::write`].
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    /// The operator's identity in the tests (user `kube-remediator-e2e`, system:masters), so
    /// the audit log tells its requests from the tests' own.
    pub operator_cert: PathBuf,
    pub operator_key: PathBuf,
    /// Private key that signs service-account tokens.
    pub service_account_key: PathBuf,
    /// Its public half, which verifies them.
    pub service_account_pub: PathBuf,
}

impl Pki {
    /// Generates every key and certificate into `dir`.
    pub fn write(dir: &Path) -> Result<Pki> {
        std::fs::create_dir_all(dir)?;
        let pki = Pki {
            ca_cert: dir.join("ca.crt"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            operator_cert: dir.join("operator.crt"),
            operator_key: dir.join("operator.key"),
            service_account_key: dir.join("service-account.key"),
            service_account_pub: dir.join("service-account.pub"),
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name.push(DnType::CommonName, "kube-remediator test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        std::fs::write(&pki.ca_cert, ca_cert.pem())?;

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        std::fs::write(&pki.serving_cert, serving.signed_by(&serving_key, &issuer)?.pem())?;
        std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;

        for (user, cert, key) in [
            (ADMIN_USER, &pki.admin_cert, &pki.admin_key),
            (OPERATOR_USER, &pki.operator_cert, &pki.operator_key),
        ] {
            let client_key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name.push(DnType::CommonName, user);
            params.distinguished_name.push(DnType::OrganizationName, "system:masters");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            std::fs::write(cert, params.signed_by(&client_key, &issuer)?.pem())?;
            std::fs::write(key, client_key.serialize_pem())?;
        }

        let sa_key = KeyPair::generate()?;
        std::fs::write(&pki.service_account_key, sa_key.serialize_pem())
            .context("writing the service-account key")?;
        std::fs::write(&pki.service_account_pub, sa_key.public_key_pem())?;
        Ok(pki)
    }

    /// A kubeconfig for the admin identity against `server`, referencing the PEM files by path.
    pub fn kubeconfig(&self, server: &str) -> String {
        self.kubeconfig_for(server, &self.admin_cert, &self.admin_key)
    }

    /// A kubeconfig for the operator's identity.
    pub fn operator_kubeconfig(&self, server: &str) -> String {
        self.kubeconfig_for(server, &self.operator_cert, &self.operator_key)
    }

    fn kubeconfig_for(&self, server: &str, cert: &Path, key: &Path) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: admin\ncurrent-context: local\n",
            ca = self.ca_cert.display(),
            cert = cert.display(),
            key = key.display(),
        )
    }
}
