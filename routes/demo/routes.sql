-- instance: i1
-- i1's routing tables, as SQL Server would state them (router routes load routes/demo/routes.sql).
-- The same rows as i1's part of routes.yaml: load one or the other, not both.
--
-- SQL Server creates AutoCreatedLocal in every database, msdb included (R8); the router has no
-- implicit routes, so the script creates it.

USE AW;
GO

CREATE ROUTE AutoCreatedLocal WITH ADDRESS = 'LOCAL';

-- OrderParts lives on i2, reached through the forwarder f1 (M2 -> C3).
CREATE ROUTE OrderPartsRoute
    WITH SERVICE_NAME = 'OrderParts',
         ADDRESS = 'TCP://f1.example:4022';
GO

USE msdb;
GO

-- Messages from other instances are delivered to whichever local database hosts the service (S3).
CREATE ROUTE AutoCreatedLocal WITH ADDRESS = 'LOCAL';
GO
