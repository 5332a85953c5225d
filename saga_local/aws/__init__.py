"""The local AWS side: moto, the template's resources provisioned into it, and Lambda's event sources."""
